// Tests of harness/process: real children started, stopped and reaped.
#include "harness/process.hpp"

#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

namespace kvmesh::harness {
namespace {

int wait_status(pid_t pid) {
  int st = 0;
  EXPECT_EQ(waitpid(pid, &st, 0), pid);
  return st;
}

TEST(Process, ExitStatusIsDescribed) {
  auto pid = spawn_child({"sh", "-c", "exit 3"});
  ASSERT_TRUE(pid);
  EXPECT_EQ(describe_exit(wait_status(*pid)), "exited with status 3");
}

TEST(Process, AnExecFailureExits127) {
  auto pid = spawn_child({"/nonexistent/program"});
  ASSERT_TRUE(pid);
  const int st = wait_status(*pid);
  ASSERT_TRUE(WIFEXITED(st));
  EXPECT_EQ(WEXITSTATUS(st), 127);
  EXPECT_FALSE(spawn_child({}));
}

TEST(Process, OutputAndEnvironmentReachTheChild) {
  auto dir = make_temp_dir("kvmesh-process-test");
  ASSERT_TRUE(dir);
  temp_dir_guard guard{*dir};
  child_options co;
  co.output = *dir + "/out.log";
  co.env = {"KVMESH_PROCESS_TEST=seen", "HOME=/elsewhere"};
  auto pid = spawn_child(
      {"sh", "-c", "echo one; echo $KVMESH_PROCESS_TEST; echo $HOME >&2"}, co);
  ASSERT_TRUE(pid);
  wait_status(*pid);
  EXPECT_EQ(file_tail(co.output, 2), "seen\n/elsewhere\n");
  EXPECT_EQ(file_tail(co.output, 10), "one\nseen\n/elsewhere\n");
  EXPECT_EQ(file_tail(*dir + "/missing.log", 10), "");
}

TEST(Process, ChildrenRunInTheirOwnProcessGroup) {
  auto pid = spawn_child({"sleep", "5"});
  ASSERT_TRUE(pid);
  EXPECT_EQ(getpgid(*pid), *pid);
  std::vector<pid_t> pids{*pid};
  std::vector<int> statuses;
  stop_children(pids, std::chrono::seconds(2), statuses);
  EXPECT_EQ(pids[0], -1);
  ASSERT_EQ(statuses.size(), 1u);
  EXPECT_EQ(describe_exit(statuses[0]), "killed by signal 15 (Terminated)");
}

TEST(Process, AChildIgnoringTheSignalIsKilledAfterTheGrace) {
  // trap '' TERM: sh ignores SIGTERM, as a hung child would.
  auto pid = spawn_child({"sh", "-c", "trap '' TERM; sleep 5"});
  ASSERT_TRUE(pid);
  std::this_thread::sleep_for(std::chrono::milliseconds(100));  // the trap
  std::vector<pid_t> pids{*pid, -1};
  std::vector<int> statuses;
  stop_children(pids, std::chrono::milliseconds(200), statuses);
  EXPECT_EQ(pids, (std::vector<pid_t>{-1, -1}));
  EXPECT_EQ(statuses[0], -1);  // killed after the grace
  EXPECT_EQ(statuses[1], 0);   // nothing to stop
}

TEST(Process, CpuSecondsOfLiveAndGoneProcesses) {
  EXPECT_GE(cpu_seconds(getpid()), 0);
  auto pid = spawn_child({"true"});
  ASSERT_TRUE(pid);
  wait_status(*pid);
  EXPECT_EQ(cpu_seconds(*pid), -1);
}

TEST(Process, TempDirGoesWithItsGuard) {
  std::string path;
  {
    auto dir = make_temp_dir("kvmesh-process-test");
    ASSERT_TRUE(dir);
    path = *dir;
    temp_dir_guard guard{path};
    std::ofstream(path + "/f") << "x";
    EXPECT_TRUE(std::filesystem::exists(path + "/f"));
  }
  EXPECT_FALSE(std::filesystem::exists(path));
}

TEST(Process, AFreePortAcceptsNothing) {
  auto port = free_loopback_port();
  ASSERT_TRUE(port);
  EXPECT_GT(*port, 0);
  EXPECT_FALSE(loopback_accepting(*port));
}

TEST(Process, SelfExeIsThisTest) {
  auto exe = self_exe();
  ASSERT_TRUE(exe);
  EXPECT_NE(exe->find("kvmesh_harness_tests"), std::string::npos);
}

}  // namespace
}  // namespace kvmesh::harness
