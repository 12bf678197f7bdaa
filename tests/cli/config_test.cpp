// Tests of cli/config: keys and variables of flags, the TOML reader's
// checks, and flag > environment > file > default on a small command tree.
#include "cli/config.hpp"

#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <memory>

#include "core/log.hpp"

namespace kvmesh::cli {
namespace {

key_spec spec(const std::string& key, value_kind kind, bool list = false) {
  key_spec k;
  k.key = key;
  k.env = env_of(key);
  k.kind = kind;
  k.list = list;
  return k;
}

std::vector<key_spec> table() {
  key_spec fanout = spec("router.fanout", value_kind::unsigned_integer);
  key_spec beta = spec("router.beta", value_kind::floating);
  key_spec durable = spec("router.durable", value_kind::boolean);
  key_spec url = spec("nats.url", value_kind::text);
  key_spec offset = spec("agent.offset", value_kind::integer);
  key_spec ids = spec("agent.ids", value_kind::unsigned_integer, true);
  return {url, fanout, beta, durable, offset, ids};
}

TEST(config_keys, of_flags) {
  EXPECT_EQ(key_of("router", "max-inflight"), "router.max_inflight");
  EXPECT_EQ(env_of("router.max_inflight"), "KVMESH_ROUTER_MAX_INFLIGHT");
  EXPECT_EQ(env_of("nats.url"), "KVMESH_NATS_URL");
}

TEST(config_file, reads_values_as_flag_texts) {
  auto fv = read_config(
      "[nats]\nurl = \"nats://a:4222,nats://b:4222\"\n"
      "[router]\nfanout = 8\nbeta = 2  # an integer for a number\n"
      "durable = true\n[agent]\noffset = -3\nids = [1, 2]\n",
      "k.toml", table());
  ASSERT_TRUE(fv) << fv.err().message;
  EXPECT_EQ(fv->at("nats.url").texts[0], "nats://a:4222,nats://b:4222");
  EXPECT_EQ(fv->at("router.fanout").texts[0], "8");
  EXPECT_EQ(fv->at("router.fanout").line, 4u);
  EXPECT_EQ(fv->at("router.beta").texts[0], "2");
  EXPECT_EQ(fv->at("router.durable").texts[0], "true");
  EXPECT_EQ(fv->at("agent.offset").texts[0], "-3");
  EXPECT_EQ(fv->at("agent.ids").texts, (std::vector<std::string>{"1", "2"}));
  EXPECT_EQ(fv->at("agent.ids").shown, "[1, 2]");
}

TEST(config_file, an_integer_for_a_number_reads_as_the_number_it_becomes) {
  // Past 2^53 an integer has no double of its own (the config fuzzer's
  // find): its text is the double's, so that written back with toml_value
  // it reads back the same.
  auto fv =
      read_config("[router]\nbeta = 6666666666666666666\n", "k.toml", table());
  ASSERT_TRUE(fv) << fv.err().message;
  const std::string text = fv->at("router.beta").texts[0];
  EXPECT_EQ(text, "6.666666666666667e+18");
  auto again =
      read_config("[router]\nbeta = " + toml_value(table()[2], {text}) + "\n",
                  "k.toml", table());
  ASSERT_TRUE(again) << again.err().message;
  EXPECT_EQ(again->at("router.beta").texts[0], text);
}

// Every error names the file, the line and the key.
void expect_error(const std::string& text, const std::string& want) {
  auto fv = read_config(text, "k.toml", table());
  ASSERT_FALSE(fv) << "accepted: " << text;
  EXPECT_NE(fv.err().message.find(want), std::string::npos) << fv.err().message;
}

TEST(config_file, unknown_key_named_with_a_guess) {
  expect_error("[router]\n\nfanot = 8\n",
               "k.toml:3: unknown key router.fanot (did you mean "
               "router.fanout?)");
  expect_error("[routr]\nfanout = 8\n",
               "k.toml:1: unknown section [routr] (did you mean [router]?)");
  expect_error("fanout = 8\n",
               "k.toml:1: key 'fanout' is outside any "
               "section");
  expect_error("[router.price]\nbeta = 1\n", "unknown key router.price");
}

TEST(config_file, wrong_type_named) {
  expect_error("[router]\nfanout = \"8\"\n",
               "k.toml:2: router.fanout: want an integer >= 0, got a string");
  expect_error("[router]\nfanout = -1\n",
               "k.toml:2: router.fanout: want an integer >= 0, got -1");
  expect_error("[router]\nfanout = 1.5\n", "want an integer >= 0, got a float");
  expect_error("[router]\nbeta = \"high\"\n",
               "router.beta: want a number, got a string");
  expect_error("[router]\nbeta = nan\n", "router.beta: want a finite number");
  expect_error("[router]\ndurable = 1\n",
               "router.durable: want true or false, got an integer");
  expect_error("[nats]\nurl = 4222\n",
               "nats.url: want a string, got an "
               "integer");
  expect_error("[agent]\nids = 3\n", "agent.ids: want an array");
  expect_error("[agent]\nids = [1, \"x\"]\n", "agent.ids: want an integer");
}

TEST(config_file, every_problem_reported_in_line_order) {
  auto fv = read_config("[router]\nfanout = true\nbeta = \"x\"\nnope = 1\n",
                        "k.toml", table());
  ASSERT_FALSE(fv);
  const std::string& m = fv.err().message;
  const auto a = m.find("k.toml:2:"), b = m.find("k.toml:3:"),
             c = m.find("k.toml:4:");
  ASSERT_NE(a, std::string::npos) << m;
  ASSERT_NE(b, std::string::npos) << m;
  ASSERT_NE(c, std::string::npos) << m;
  EXPECT_LT(a, b);
  EXPECT_LT(b, c);
}

TEST(config_file, not_toml_names_line_and_column) {
  expect_error("[router]\nfanout = = 8\n", "k.toml:2:");
  expect_error("[router]\nfanout = 8\nfanout = 9\n", "k.toml:3:");
}

TEST(config_file, values_as_toml) {
  key_spec f = spec("x.f", value_kind::floating);
  EXPECT_EQ(toml_value(f, {"1"}), "1.0");
  EXPECT_EQ(toml_value(f, {"0.05"}), "0.05");
  EXPECT_EQ(toml_value(f, {"1e-06"}), "1e-06");
  EXPECT_EQ(toml_value(f, {"3600"}), "3600.0");
  EXPECT_EQ(toml_value(f, {"0.1"}), "0.1");
  key_spec b = spec("x.b", value_kind::boolean);
  EXPECT_EQ(toml_value(b, {"false"}), "false");
  EXPECT_EQ(toml_value(b, {"1"}), "true");
  key_spec t = spec("x.t", value_kind::text);
  EXPECT_EQ(toml_value(t, {"a \"b\"\\"}), "\"a \\\"b\\\"\\\\\"");
  key_spec l = spec("x.l", value_kind::integer, true);
  EXPECT_EQ(toml_value(l, {"1", "2"}), "[1, 2]");
}

TEST(config_file, nearest_key) {
  EXPECT_EQ(nearest_key("router.fanuot", table()), "router.fanout");
  EXPECT_EQ(nearest_key("something.else", table()), "");
}

// -- precedence on a command tree ------------------------------------------

struct values {
  std::string nats;
  uint32_t fanout = 64;
  double beta = 1;
  bool durable = false;
  uint32_t workers = 0;
  uint32_t id = 0;
  std::string tokens;
};

void build(CLI::App& app, values& v) {
  auto* r = app.add_subcommand("router");
  r->add_option("--nats", v.nats)->required();
  r->add_option("--fanout", v.fanout)
      ->check(CLI::Range(1, 1000))
      ->capture_default_str();
  r->add_option("--beta", v.beta)->capture_default_str();
  r->add_flag("--durable", v.durable);
  auto* a = app.add_subcommand("agent");
  a->add_option("--nats", v.nats)->required();
  a->add_option("--workers", v.workers)->required()->check(CLI::Range(1, 64));
  a->add_option("--id", v.id);
  auto* c = app.add_subcommand("route");
  c->add_option("--nats", v.nats)->required();
  c->add_option("--tokens", v.tokens);
}

class tree : public ::testing::Test {
 protected:
  void SetUp() override {
    set_command_factory([](CLI::App& app, std::function<int()>&) {
      // Each tree its own values, as the commands' add_* make them.
      static std::vector<std::unique_ptr<values>> trees;
      trees.push_back(std::make_unique<values>());
      build(app, *trees.back());
    });
    build(app, v);
    enable_config(app);
    // ctest runs each test as a process of its own, several at once.
    path = ::testing::TempDir() + "kvmesh_config_test_" +
           std::to_string(::getpid()) + ".toml";
  }
  void TearDown() override {
    for (const char* e :
         {"KVMESH_CONFIG", "KVMESH_NATS_URL", "KVMESH_ROUTER_FANOUT",
          "KVMESH_ROUTER_DURABLE", "KVMESH_LOG_LEVEL", "KVMESH_LOG_FORMAT"})
      ::unsetenv(e);
    std::remove(path.c_str());
    log::set_level(log::level::info);
    log::set_format(log::format::plain);
    log::set_proc("");
  }
  void write(const std::string& text) { std::ofstream(path) << text; }
  void parse(const std::string& args) { app.parse(args, false); }
  std::string error_of(const std::string& args) {
    try {
      parse(args);
    } catch (const config_error& e) {
      EXPECT_EQ(e.get_exit_code(), 2);
      return e.what();
    } catch (const CLI::ParseError& e) {
      return std::string("CLI11: ") + e.what();
    }
    return "no error";
  }
  CLI::App app;
  values v;
  std::string path;
};

TEST_F(tree, default_when_nothing_sets_it) {
  parse("router --nats nats://x");
  EXPECT_EQ(v.fanout, 64u);
  EXPECT_FALSE(v.durable);
}

TEST_F(tree, file_beats_default) {
  write(
      "[nats]\nurl = \"nats://file\"\n[router]\nfanout = 8\nbeta = 0.5\n"
      "durable = true\n");
  parse("router --config " + path);
  EXPECT_EQ(v.nats, "nats://file");  // and --nats is no longer missing
  EXPECT_EQ(v.fanout, 8u);
  EXPECT_DOUBLE_EQ(v.beta, 0.5);
  EXPECT_TRUE(v.durable);
  EXPECT_FALSE(
      from_command_line(app.get_subcommand("router")->get_option("--fanout")));
}

TEST_F(tree, environment_beats_file) {
  write("[nats]\nurl = \"nats://file\"\n[router]\nfanout = 8\n");
  ::setenv("KVMESH_ROUTER_FANOUT", "16", 1);
  ::setenv("KVMESH_NATS_URL", "nats://env", 1);
  parse("router --config " + path);
  EXPECT_EQ(v.fanout, 16u);
  EXPECT_EQ(v.nats, "nats://env");
}

TEST_F(tree, flag_beats_environment_and_file) {
  write("[router]\nfanout = 8\ndurable = true\n");
  ::setenv("KVMESH_ROUTER_FANOUT", "16", 1);
  parse("router --nats nats://flag --fanout 32 --config " + path);
  EXPECT_EQ(v.fanout, 32u);
  EXPECT_EQ(v.nats, "nats://flag");
  EXPECT_TRUE(v.durable);
  EXPECT_TRUE(
      from_command_line(app.get_subcommand("router")->get_option("--fanout")));
}

TEST_F(tree, config_from_the_environment) {
  write("[router]\nfanout = 8\n");
  ::setenv("KVMESH_CONFIG", path.c_str(), 1);
  parse("router --nats nats://x");
  EXPECT_EQ(v.fanout, 8u);
}

TEST_F(tree, environment_without_a_file) {
  ::setenv("KVMESH_NATS_URL", "nats://env", 1);
  ::setenv("KVMESH_ROUTER_DURABLE", "true", 1);
  parse("router");
  EXPECT_EQ(v.nats, "nats://env");
  EXPECT_TRUE(v.durable);
}

TEST_F(tree, clients_read_only_shared_keys) {
  write("[nats]\nurl = \"nats://file\"\n");
  parse("route --config " + path);
  EXPECT_EQ(v.nats, "nats://file");
  EXPECT_EQ(app.get_subcommand("route")->get_option_no_throw("--log-level"),
            nullptr);
}

TEST_F(tree, out_of_range_value_names_file_line_and_key) {
  write("[router]\n\nfanout = 5000\n");
  const std::string e = error_of("router --nats n --config " + path);
  EXPECT_NE(e.find("kvmesh router: " + path + ":3: router.fanout = 5000: "),
            std::string::npos)
      << e;
}

TEST_F(tree, too_large_for_its_type_is_out_of_range) {
  write("[router]\nbeta = 1\n[agent]\nid = 99999999999\n");
  const std::string e = error_of("router --nats n --config " + path);
  EXPECT_NE(e.find(":4: agent.id = 99999999999: out of range"),
            std::string::npos)
      << e;
}

TEST_F(tree, a_bad_section_of_another_command_still_fails) {
  write("[agent]\nworkers = 0\n");
  const std::string e = error_of("router --nats n --config " + path);
  EXPECT_NE(e.find(":2: agent.workers = 0"), std::string::npos) << e;
}

TEST_F(tree, unknown_key_fails_the_command) {
  write("[router]\nfanout_max = 3\n");
  const std::string e = error_of("router --nats n --config " + path);
  EXPECT_NE(e.find("unknown key router.fanout_max"), std::string::npos) << e;
}

TEST_F(tree, bad_environment_value_names_the_variable) {
  ::setenv("KVMESH_ROUTER_FANOUT", "many", 1);
  const std::string e = error_of("router --nats n");
  EXPECT_NE(e.find("KVMESH_ROUTER_FANOUT=many"), std::string::npos) << e;
  EXPECT_NE(e.find("--fanout"), std::string::npos) << e;
}

TEST_F(tree, environment_of_another_command_is_ignored) {
  ::setenv("KVMESH_ROUTER_FANOUT", "many", 1);
  parse("agent --nats n --workers 2");
  EXPECT_EQ(v.workers, 2u);
}

TEST_F(tree, missing_file_is_an_error) {
  const std::string e = error_of("router --nats n --config /nonexistent.toml");
  EXPECT_NE(e.find("/nonexistent.toml: cannot read"), std::string::npos) << e;
}

TEST_F(tree, still_required_without_file_or_environment) {
  const std::string e = error_of("router");
  EXPECT_NE(e.find("CLI11: --nats is required"), std::string::npos) << e;
}

TEST_F(tree, log_settings_from_the_file) {
  write("[log]\nlevel = \"debug\"\nformat = \"json\"\n");
  parse("router --nats n --config " + path);
  EXPECT_EQ(log::current_level(), log::level::debug);
  EXPECT_EQ(log::current_format(), log::format::json);
  EXPECT_STREQ(std::getenv("KVMESH_LOG_FORMAT"), "json");
  write("[log]\nlevel = \"loud\"\n");
  EXPECT_NE(error_of("router --nats n --config " + path)
                .find(":2: log.level = \"loud\": unknown log level 'loud'"),
            std::string::npos);
}

TEST_F(tree, key_table_from_the_flags) {
  const auto keys = config_keys();
  std::vector<std::string> names;
  for (const auto& k : keys)
    names.push_back(k.key);
  // Shared sections first, then the commands' in config_commands order.
  EXPECT_EQ(names,
            (std::vector<std::string>{
                "nats.url", "log.level", "log.format", "agent.workers",
                "agent.id", "router.fanout", "router.beta", "router.durable"}));
  const key_spec& url = keys[0];
  EXPECT_FALSE(url.has_default);  // required
  EXPECT_EQ(url.commands,
            (std::vector<std::string>{"agent", "router", "route"}));
  EXPECT_EQ(keys[1].default_text, "info");
  const key_spec& fanout = keys[5];
  EXPECT_EQ(fanout.kind, value_kind::unsigned_integer);
  EXPECT_EQ(fanout.default_text, "64");
  EXPECT_EQ(fanout.env, "KVMESH_ROUTER_FANOUT");
  EXPECT_EQ(keys[6].kind, value_kind::floating);
  EXPECT_EQ(keys[7].kind, value_kind::boolean);
  EXPECT_EQ(keys[7].default_text, "false");
}

}  // namespace
}  // namespace kvmesh::cli
