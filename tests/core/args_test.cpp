// Tests of core/args: values refused with the words people see.
// And accepted in every form the docs give.
#include "core/args.hpp"

#include <gtest/gtest.h>

#include "core/block_hash.hpp"

namespace kvmesh {
namespace {

bool has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

TEST(args, check_url_takes_every_documented_form) {
  for (const char* url :
       {"nats://127.0.0.1:4222", "tls://nats.example:4443", "localhost",
        "nats://user:secret@host:1", "token@host", "[::1]:4222",
        "nats://[fe80::1]", "host:65535"})
    EXPECT_TRUE(check_url(url, 1, url)) << url;
}

TEST(args, check_url_names_what_is_wrong) {
  const std::pair<const char*, const char*> bad[] = {
      {"http://host:4222", "has scheme 'http'"},
      {"nats://host/path", "is not [nats://]host[:port]"},
      {"nats://host:", "has an empty port"},
      {"nats://:4222", "has no host"},
      {"[::1", "has no ']'"},
      {"host:0", "has port '0' (want 1 to 65535)"},
      {"host:65536", "has port '65536'"},
      {"host:42x", "has port '42x'"}};
  for (const auto& [url, why] : bad) {
    auto st = check_url(url, 1, url);
    ASSERT_FALSE(st) << url;
    EXPECT_EQ(st.err().code, ec::parse_error);
    EXPECT_TRUE(
        has(st.err().message, std::string("--nats: '") + url + "' " + why))
        << st.err().message;
  }
}

TEST(args, split_urls_trims_and_names_the_entry) {
  auto urls = split_urls(" nats://a:1 ,b:2");
  ASSERT_TRUE(urls);
  EXPECT_EQ(*urls, (std::vector<std::string>{"nats://a:1", "b:2"}));
  EXPECT_EQ(url_list(" nats://a:1 ,b:2"), "nats://a:1,b:2");
  auto empty = split_urls("a:1,,b:2");
  ASSERT_FALSE(empty);
  EXPECT_EQ(empty.err().message, "--nats: entry 2 of 'a:1,,b:2' is empty");
  auto port = split_urls("a:1,b:0");
  ASSERT_FALSE(port);
  EXPECT_TRUE(has(port.err().message, "--nats: entry 2 'b:0' has port"));
  EXPECT_EQ(url_list("a:1,b:0"), "");
}

TEST(args, check_prefix_wants_subject_tokens) {
  EXPECT_TRUE(check_prefix("kvmesh"));
  EXPECT_TRUE(check_prefix("team-a.kv_mesh.2"));
  const std::pair<const char*, const char*> bad[] = {
      {"", "is empty"},
      {"a..b", "has an empty subject token"},
      {"a.", "has an empty subject token"},
      {"a b", "holds ' '"},
      {"a.*", "holds '*'"},
      {"a>", "holds '>'"}};
  for (const auto& [prefix, why] : bad) {
    auto st = check_prefix(prefix);
    ASSERT_FALSE(st) << prefix;
    EXPECT_EQ(st.err().code, ec::invalid_argument);
    EXPECT_TRUE(
        has(st.err().message, std::string("--prefix: '") + prefix + "' " + why))
        << st.err().message;
  }
}

TEST(args, parse_shard_takes_i_of_n) {
  auto s = parse_shard("2/3");
  ASSERT_TRUE(s);
  EXPECT_EQ(*s, std::make_pair(2u, 3u));
  const std::pair<const char*, const char*> bad[] = {
      {"2", "has no '/'"},
      {"+1/2", "has no shard number I"},
      {"1/2x", "has no shard count N"},
      {"0/0", "has no shards (N must be at least 1)"},
      {"3/3", "names a shard past the last one"},
      {"1234567890/2", "has no shard number I"}};
  for (const auto& [text, why] : bad) {
    auto r = parse_shard(text);
    ASSERT_FALSE(r) << text;
    EXPECT_EQ(r.err().code, ec::parse_error);
    EXPECT_TRUE(has(r.err().message, std::string("--shard: '") + text + "' " +
                                         why + " (expected I/N"))
        << r.err().message;
  }
}

TEST(args, parse_token_list_names_the_entry) {
  auto t = parse_token_list("1,2,4294967295");
  ASSERT_TRUE(t);
  EXPECT_EQ(*t, (std::vector<uint32_t>{1, 2, 4294967295u}));
  auto empty = parse_token_list("");
  ASSERT_FALSE(empty);
  EXPECT_EQ(empty.err().code, ec::empty_input);
  for (const auto& [text, entry] :
       {std::pair<const char*, const char*>{"1,2x,3", "entry 2 '2x'"},
        {"-1,2", "entry 1 '-1'"},
        {"1,4294967296", "entry 2 '4294967296'"},
        {"1,", "entry 2 ''"}}) {
    auto r = parse_token_list(text);
    ASSERT_FALSE(r) << text;
    EXPECT_EQ(r.err().code, ec::parse_error);
    EXPECT_TRUE(has(r.err().message,
                    std::string("--tokens: ") + entry + " is not a token id"))
        << r.err().message;
  }
}

TEST(args, token_chain_is_the_sequence_hashes) {
  const std::vector<uint32_t> tokens{1, 2, 3, 4, 5, 6, 7, 8, 9};
  auto chain = token_chain(tokens, 4, "lora-a");
  auto hashes = hash_blocks(tokens, 4, "lora-a");
  ASSERT_TRUE(chain);
  ASSERT_TRUE(hashes);
  ASSERT_EQ(chain->size(), 2u);  // the ninth token makes no full block
  EXPECT_EQ((*chain)[0], (*hashes)[0].seq);
  EXPECT_EQ((*chain)[1], (*hashes)[1].seq);
  auto short_prompt = token_chain({1, 2, 3}, 4, "");
  ASSERT_TRUE(short_prompt);  // routed on queue and occupancy alone
  EXPECT_TRUE(short_prompt->empty());
  auto zero = token_chain({1, 2}, 0, "");
  ASSERT_FALSE(zero);
  EXPECT_TRUE(has(zero.err().message, "--tokens: ")) << zero.err().message;
}

}  // namespace
}  // namespace kvmesh
