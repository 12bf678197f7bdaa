// Tests of harness/launcher: command lines, start, watch and reap.
// The command lines `up` and `bench` give their children, and real child
// processes started, watched and reaped.
#include "harness/launcher.hpp"

#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

namespace kvmesh::harness {
namespace {

using argv_t = std::vector<std::string>;

// The options `kvmesh up --workers 5 --agents 2 --routers 2 --shards 2
// --heartbeat-ms 300 --threads 2 --durable --fanout 8 --seed 9
// --time-scale 3` launches with.
launch_options up_like() {
  launch_options o;
  o.exe = "KVMESH";
  o.url = "nats://127.0.0.1:PORT";
  o.prefix = "kvmesh";
  o.dir = "/d";
  o.fleet.workers = 5;
  o.fleet.routers = 2;
  o.fleet.seed = 9;
  o.shards = 2;
  o.agents = 2;
  o.fanout = 8;
  o.time_scale = 3;
  o.heartbeat_ms = 300;
  o.threads = 2;
  o.durable = true;
  return o;
}

// The options `kvmesh bench --mode throughput --workers 4 --agents 2
// --routers 2 --threads 1 --prefix bp` launches with.
launch_options bench_like() {
  launch_options o;
  o.exe = "KVMESH";
  o.url = "nats://127.0.0.1:PORT";
  o.prefix = "bp";
  o.dir = "/d";
  o.fleet.workers = 4;
  o.fleet.routers = 2;
  o.shards = 1;
  o.agents = 2;
  o.fanout = 16;
  o.time_scale = 1000;
  o.heartbeat_ms = 1000;
  o.threads = 1;
  o.price_costs = true;
  o.heartbeat_first = true;
  o.logs_in_dir = true;
  return o;
}

argv_t agent_tail(const std::string& name, const char* workers,
                  const char* first, const char* time_scale) {
  return {"--engine",       "sim",     "--name",          name,
          "--workers",      workers,   "--worker-id",     first,
          "--gpu-blocks",   "1024",    "--host-blocks",   "4096",
          "--disk-blocks",  "16384",   "--block-tokens",  "512",
          "--model-factor", "1",       "--refuse-growth", "0.05",
          "--time-scale",   time_scale};
}

argv_t concat(argv_t a, const argv_t& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// Byte for byte what `kvmesh up` gives its children for the command above,
// as ps shows them: --heartbeat-ms with each role's flags, routers with
// --durable and without the tiers' credits.
TEST(Launcher, UpCommandLinesAreUps) {
  const auto cmds = mesh_commands(up_like());
  const argv_t common{"--nats",    "nats://127.0.0.1:PORT",
                      "--prefix",  "kvmesh",
                      "--threads", "2"};
  auto head = [&](const char* role) {
    return concat({"KVMESH", role}, common);
  };
  const std::vector<argv_t> want{
      concat(head("index"),
             {"--shard", "0/2", "--db", "/d/shard-0", "--heartbeat-ms", "300"}),
      concat(head("index"),
             {"--shard", "1/2", "--db", "/d/shard-1", "--heartbeat-ms", "300"}),
      concat(concat(head("agent"), agent_tail("agent-0", "3", "0", "3")),
             {"--heartbeat-ms", "300"}),
      concat(concat(head("agent"), agent_tail("agent-3", "2", "3", "3")),
             {"--heartbeat-ms", "300"}),
      concat(head("router"),
             {"--name", "router-0", "--fanout", "8", "--block-tokens", "512",
              "--max-auctions", "8", "--seed", "16225495544641049643",
              "--heartbeat-ms", "300", "--beta", "0", "--k", "0", "--overflow",
              "1", "--durable"}),
      concat(head("router"),
             {"--name", "router-1", "--fanout", "8", "--block-tokens", "512",
              "--max-auctions", "8", "--seed", "10412766280236422409",
              "--heartbeat-ms", "300", "--beta", "0", "--k", "0", "--overflow",
              "1", "--durable"})};
  ASSERT_EQ(cmds.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i)
    EXPECT_EQ(cmds[i].argv, want[i]) << cmds[i].name;
}

// Byte for byte what `kvmesh bench` gives its children for the command
// above: --heartbeat-ms after --prefix, routers with --c-host, --c-disk and
// --ceiling.
TEST(Launcher, BenchCommandLinesAreBenchs) {
  const auto cmds = mesh_commands(bench_like());
  const argv_t common{"--nats",         "nats://127.0.0.1:PORT",
                      "--prefix",       "bp",
                      "--heartbeat-ms", "1000",
                      "--threads",      "1"};
  auto head = [&](const char* role) {
    return concat({"KVMESH", role}, common);
  };
  const argv_t prices{"--beta",     "0",    "--k",       "0",
                      "--overflow", "1",    "--c-host",  "0.75",
                      "--c-disk",   "0.25", "--ceiling", "0"};
  const std::vector<argv_t> want{
      concat(head("index"), {"--shard", "0/1", "--db", "/d/shard-0"}),
      concat(head("agent"), agent_tail("agent-0", "2", "0", "1000")),
      concat(head("agent"), agent_tail("agent-2", "2", "2", "1000")),
      concat(concat(head("router"), {"--name", "router-0", "--fanout", "16",
                                     "--block-tokens", "512", "--max-auctions",
                                     "8", "--seed", "6485274418266381604"}),
             prices),
      concat(concat(head("router"), {"--name", "router-1", "--fanout", "16",
                                     "--block-tokens", "512", "--max-auctions",
                                     "8", "--seed", "4294279809680864835"}),
             prices)};
  ASSERT_EQ(cmds.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i)
    EXPECT_EQ(cmds[i].argv, want[i]) << cmds[i].name;
}

TEST(Launcher, ChildrenAreNamedAndAgentsSplitTheWorkers) {
  const auto cmds = mesh_commands(up_like());
  std::vector<std::string> names, hosts;
  for (const auto& c : cmds) {
    names.push_back(c.role + " " + c.name);
    hosts.push_back(c.hosts);
  }
  EXPECT_EQ(names, (std::vector<std::string>{
                       "index shard-0", "index shard-1", "agent agent-0",
                       "agent agent-3", "router router-0", "router router-1"}));
  EXPECT_EQ(hosts, (std::vector<std::string>{"", "", "workers 0-2",
                                             "workers 3-4", "", ""}));
  EXPECT_EQ(agent_share(5, 2, 0), 3u);
  EXPECT_EQ(agent_share(5, 2, 1), 2u);
  EXPECT_EQ(agent_share(4, 4, 3), 1u);
}

TEST(Launcher, RouterFlagsFollowTheFleetsPrices) {
  launch_options o = up_like();
  o.durable = false;
  o.price_costs = true;
  o.fleet.routers = 1;
  o.fleet.price.beta = 0.5;
  o.fleet.price.c_host = 0.125;
  o.fleet.price.overload_ceiling = 7;
  const argv_t argv = mesh_commands(o).back().argv;
  auto value_of = [&](const std::string& flag) -> std::string {
    for (size_t i = 0; i + 1 < argv.size(); ++i)
      if (argv[i] == flag) return argv[i + 1];
    return "(missing)";
  };
  EXPECT_EQ(value_of("--beta"), "0.5");
  EXPECT_EQ(value_of("--c-host"), "0.125");
  EXPECT_EQ(value_of("--ceiling"), "7");
  EXPECT_EQ(std::count(argv.begin(), argv.end(), "--durable"), 0);
}

TEST(Launcher, LayoutChecksNameTheFlag) {
  EXPECT_EQ(check_layout(1, 2, 4), "");
  EXPECT_EQ(check_layout(0, 1, 4), "--shards must be at least 1");
  EXPECT_EQ(check_layout(1, 0, 4), "--agents must be at least 1");
  EXPECT_EQ(check_layout(1, 5, 4),
            "--agents: 5 agents for 4 workers (--workers): each agent needs "
            "one at least");
  EXPECT_EQ(check_layout(1, 1, 70000), "--workers: at most 65536");
}

TEST(Launcher, LaunchForTakesTheMeshsServerAndDirectory) {
  child_mesh m;
  m.url = "nats://h:1";
  m.dir = "/run";
  sim_config fleet;
  fleet.workers = 3;
  const launch_options o = launch_for("/bin/kvmesh", m, "p", fleet);
  EXPECT_EQ(o.exe, "/bin/kvmesh");
  EXPECT_EQ(o.url, "nats://h:1");
  EXPECT_EQ(o.dir, "/run");
  EXPECT_EQ(o.prefix, "p");
  EXPECT_EQ(o.fleet.workers, 3u);
  EXPECT_FALSE(o.durable || o.price_costs || o.heartbeat_first ||
               o.logs_in_dir);
}

TEST(Launcher, NatsCommandHasJetStreamOnlyWhenAsked) {
  EXPECT_EQ(nats_command("nats-server", 4222, "/d", true),
            (argv_t{"nats-server", "-a", "127.0.0.1", "-p", "4222", "-js",
                    "-sd", "/d/jetstream", "-l", "/d/nats-server.log"}));
  EXPECT_EQ(
      nats_command("ns", 1, "/x", false),
      (argv_t{"ns", "-a", "127.0.0.1", "-p", "1", "-l", "/x/nats-server.log"}));
}

TEST(Launcher, FlagValuesReadBackTheSame) {
  EXPECT_EQ(arg(0.05), "0.05");
  EXPECT_EQ(arg(1.0), "1");
  EXPECT_EQ(std::stod(arg(0.1 + 0.2)), 0.1 + 0.2);
  EXPECT_EQ(arg(uint64_t{18446744073709551615ull}), "18446744073709551615");
  EXPECT_EQ(host_share_threads(3, 7), 7u);
  EXPECT_GE(host_share_threads(1000), 1u);
}

// The mesh's children are real processes here: /bin/true and /bin/false
// stand in for kvmesh, which they would be given as argv[0].
class LaunchedMesh : public ::testing::Test {
 protected:
  void SetUp() override {
    auto d = make_temp_dir("kvmesh-launcher-test");
    ASSERT_TRUE(d);
    m.dir = m.temp.path = *d;
    sigemptyset(&m.signals);
  }

  // Reaps until every child of `m` ended, or 5 s.
  std::vector<ended_child> reap_all() {
    std::vector<ended_child> out;
    const auto deadline =
        std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (out.size() < m.procs.size() + m.nats.size() &&
           std::chrono::steady_clock::now() < deadline) {
      if (auto e = reap_one(m))
        out.push_back(*e);
      else
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return out;
  }

  child_mesh m;
};

TEST_F(LaunchedMesh, StartsEveryChildInOrderWithItsLog) {
  launch_options o = bench_like();
  o.exe = "/bin/true";
  o.dir = m.dir;
  std::vector<std::string> told;
  ASSERT_EQ(start_mesh(m, o,
                       [&](const planned_child& c, pid_t pid) {
                         EXPECT_GT(pid, 0);
                         told.push_back(c.name);
                       }),
            "");
  EXPECT_EQ(told, (std::vector<std::string>{"shard-0", "agent-0", "agent-2",
                                            "router-0", "router-1"}));
  ASSERT_EQ(m.procs.size(), 5u);
  const auto ended = reap_all();
  ASSERT_EQ(ended.size(), 5u);
  for (const auto& e : ended) {
    EXPECT_TRUE(WIFEXITED(e.status) && WEXITSTATUS(e.status) == 0);
    EXPECT_GT(e.proc.pid, 0);  // the pid it had, for messages
  }
  for (const auto& p : m.procs) {
    EXPECT_EQ(p.pid, -1);  // reaped: nothing left to stop
    EXPECT_TRUE(std::filesystem::exists(m.log_of(p))) << p.name;
  }
}

TEST_F(LaunchedMesh, WatchTellsWhichChildEndedWithItsLog) {
  child_options co;
  co.output = m.dir + "/router-0.log";
  auto pid = spawn_child({"sh", "-c", "echo cannot bind; exit 3"}, co);
  ASSERT_TRUE(pid);
  m.procs.push_back({"router", "router-0", *pid});
  std::string why;
  for (int i = 0; i < 200 && why.empty(); ++i)
    why = watch(m, 10);
  EXPECT_EQ(why, "router router-0 (pid " + std::to_string(*pid) +
                     ") exited with status 3; its log ends:\ncannot bind\n");
  EXPECT_EQ(m.procs[0].pid, -1);
  EXPECT_EQ(watch(m, 0), "");
}

TEST_F(LaunchedMesh, NatsServerThatDiesIsReportedWithItsStatus) {
  auto n = start_nats(m, "/bin/false", false, 1);
  ASSERT_TRUE(n);
  EXPECT_EQ(n->what, nats_start::ended);
  EXPECT_EQ(n->child.proc.role, "nats-server");
  EXPECT_EQ(n->child.proc.name, "nats://127.0.0.1:" + std::to_string(n->port));
  EXPECT_EQ(describe_exit(n->child.status), "exited with status 1");
  EXPECT_EQ(n->log, m.dir + "/nats-server.log");
  EXPECT_TRUE(m.url.empty());  // only set once it accepts connections
}

TEST_F(LaunchedMesh, AChildThatCannotExecEndsWith127) {
  launch_options o = up_like();
  o.exe = "/nonexistent/kvmesh";
  o.dir = m.dir;
  // fork succeeds and exec fails in the child (exit 127): the launcher
  // starts them all, and the first one's end tells.
  ASSERT_EQ(start_mesh(m, o), "");
  const auto ended = reap_all();
  ASSERT_FALSE(ended.empty());
  EXPECT_EQ(WEXITSTATUS(ended[0].status), 127);
}

TEST_F(LaunchedMesh, StopEndsAndReapsTheChildren) {
  auto pid = spawn_child({"sleep", "30"});
  ASSERT_TRUE(pid);
  m.procs.push_back({"agent", "agent-0", *pid});
  const auto t0 = std::chrono::steady_clock::now();
  m.stop();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(4));
  EXPECT_EQ(m.procs[0].pid, -1);
  EXPECT_NE(kill(*pid, 0), 0);  // reaped: the pid is gone
}

}  // namespace
}  // namespace kvmesh::harness
