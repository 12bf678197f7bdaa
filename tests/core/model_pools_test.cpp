// Tests of core/model_pools: who serves what, as heartbeats change it.
#include "core/model_pools.hpp"

#include <gtest/gtest.h>

namespace kvmesh {
namespace {

TEST(model_pools, a_model_is_served_by_the_workers_announcing_it) {
  model_pools p;
  p.set(0, {"llama"});
  p.set(3, {"qwen", "qwen-lora"});
  auto llama = p.find("llama");
  auto lora = p.find("qwen-lora");
  ASSERT_TRUE(llama && lora);
  EXPECT_TRUE(p.serves(0, *llama));
  EXPECT_FALSE(p.serves(3, *llama));
  EXPECT_TRUE(p.serves(3, *lora));
  EXPECT_FALSE(p.serves(1, *lora));   // announced nothing
  EXPECT_FALSE(p.serves(99, *lora));  // never heard of
  EXPECT_FALSE(p.find("mistral"));
  EXPECT_EQ(p.size(), 3u);
}

TEST(model_pools, no_model_named_means_any_worker) {
  model_pools p;
  p.set(0, {"llama"});
  auto any = p.find("");
  ASSERT_TRUE(any);
  EXPECT_EQ(*any, model_pools::any);
  EXPECT_TRUE(p.serves(0, *any));
  EXPECT_TRUE(p.serves(7, *any));
}

// The table holds what live workers announce: a name goes with the last
// worker serving it, and its id is reused, so a stream of names over time
// cannot grow it.
TEST(model_pools, a_name_is_forgotten_with_its_last_worker) {
  model_pools p;
  p.set(0, {"a"});
  p.set(1, {"a", "b"});
  p.set(0, {"c"});  // a lora unloaded, another loaded
  ASSERT_TRUE(p.find("a"));
  EXPECT_FALSE(p.serves(0, *p.find("a")));
  EXPECT_TRUE(p.serves(0, *p.find("c")));
  p.clear(1);
  EXPECT_FALSE(p.find("a"));
  EXPECT_FALSE(p.find("b"));
  EXPECT_EQ(p.size(), 1u);
  for (int i = 0; i < 1000; ++i)
    p.set(2, {"lora-" + std::to_string(i)});
  EXPECT_EQ(p.size(), 2u);
  EXPECT_TRUE(p.serves(2, *p.find("lora-999")));
  EXPECT_FALSE(p.find("lora-998"));
}

TEST(model_pools, the_same_list_again_changes_nothing) {
  model_pools p;
  p.set(0, {"x", "y"});
  const auto x = *p.find("x");
  p.set(0, {"x", "y"});
  EXPECT_EQ(*p.find("x"), x);
  EXPECT_EQ(p.size(), 2u);
  p.set(0, {"y", "x"});  // another order is another list, same pool
  EXPECT_TRUE(p.serves(0, *p.find("x")));
  EXPECT_EQ(p.size(), 2u);
}

}  // namespace
}  // namespace kvmesh
