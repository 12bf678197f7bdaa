// Tests of cluster/engine_agent: which engine URL a worker names to the
// gateways.
#include "cluster/engine_agent.hpp"

#include <gtest/gtest.h>

namespace kvmesh {
namespace {

std::string advertised(const std::string& engine, const std::string& flag,
                       const std::string& front_host) {
  auto u = advertised_engine_url(engine, flag, front_host);
  EXPECT_TRUE(u) << u.err().message;
  return u ? *u : "(error)";
}

// The engine's own URL when a gateway can reach it; none when it is this
// host's loopback and the fronts are named by another host; the flag's
// URL, or none for "off", whatever the engine URL.
TEST(engine_agent, names_the_engine_a_gateway_can_reach) {
  EXPECT_EQ(advertised("http://10.0.0.5:8000", "", "gpu-0"),
            "http://10.0.0.5:8000");
  EXPECT_EQ(advertised("http://127.0.0.1:8000", "", "127.0.0.1"),
            "http://127.0.0.1:8000");
  EXPECT_EQ(advertised("http://127.0.0.1:8000", "", "gpu-0"), "");
  EXPECT_EQ(advertised("http://localhost:8000", "", "10.0.0.5"), "");
  EXPECT_EQ(advertised("http://[::1]:8000", "", "gpu-0"), "");
  EXPECT_EQ(advertised("http://[::1]:8000", "", "::1"), "http://[::1]:8000");
  EXPECT_EQ(advertised("http://127.0.0.1:8000", "http://gpu-0:8000", "gpu-0"),
            "http://gpu-0:8000");
  EXPECT_EQ(advertised("http://10.0.0.5:8000", "off", "gpu-0"), "");
  EXPECT_EQ(advertised("", "", "gpu-0"), "");
}

TEST(engine_agent, a_flag_that_is_no_url_is_an_error) {
  auto u = advertised_engine_url("http://127.0.0.1:8000", "gpu-0:8000", "h");
  ASSERT_FALSE(u);
  EXPECT_NE(u.err().message.find("http://HOST[:PORT]"), std::string::npos)
      << u.err().message;
}

}  // namespace
}  // namespace kvmesh
