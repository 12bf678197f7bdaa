// `kvmesh load`: an open-loop load generator for a running mesh (fixed rate,
// unique request ids) that records what became of every request, so that
// scripts/chaos can count lost and duplicated decisions across faults. The
// generator is harness/open_loop's; here are the flags and the counts.
#include <nlohmann/json.hpp>

#include <atomic>
#include <cinttypes>
#include <csignal>
#include <cstdio>
#include <fstream>
#include <map>
#include <string>

#include "cli/commands.hpp"
#include "cli/number_flags.hpp"
#include "cluster/mesh.hpp"
#include "cluster/nats.hpp"
#include "core/log.hpp"
#include "harness/open_loop.hpp"

namespace kvmesh::cli {

namespace {

struct load_flags {
  std::string nats;
  std::string prefix = "kvmesh";
  harness::open_loop_options loop;
  std::string out;  // JSONL, one line per request
  bool json = false;
};

std::atomic<bool> interrupted{false};

// One JSON line per request: its times and answers.
void write_lines(const std::string& path,
                 const std::map<uint64_t, harness::outcome>& outcomes) {
  std::ofstream lines;
  if (!path.empty()) lines.open(path);
  if (!lines) return;
  for (const auto& [id, o] : outcomes) {
    nlohmann::json l = {{"id", id},
                        {"sent_ms", o.sent_ms},
                        {"answered_ms", o.answered_ms},
                        {"decisions", o.decisions},
                        {"winners", o.winners.size()},
                        {"worker", o.worker},
                        {"started", o.started},
                        {"timed_out", o.timed_out},
                        {"publish_failed", o.publish_failed},
                        {"from_record", o.from_record},
                        {"error", o.error}};
    lines << l.dump() << "\n";
  }
}

void print_counts(const harness::open_loop_counts& c, const load_flags& f) {
  if (f.json) {
    const nlohmann::json sum = {
        {"sent", c.sent},           {"publish_errors", c.publish_errors},
        {"decided", c.decided},     {"errors", c.errors},
        {"timeouts", c.timeouts},   {"late", c.late},
        {"lost", c.lost},           {"duplicates", c.duplicates},
        {"repeats", c.repeats},     {"double_runs", c.double_runs},
        {"recovered", c.recovered}, {"durable", f.loop.durable},
        {"rate", f.loop.rate}};
    std::printf("%s\n", sum.dump().c_str());
    return;
  }
  std::printf("sent %" PRIu64 " (publish errors %" PRIu64 "), decided %" PRIu64
              " (late %" PRIu64 "), errors %" PRIu64 ", timeouts %" PRIu64
              ", lost %" PRIu64 ", duplicates %" PRIu64 " (repeats %" PRIu64
              "), run twice %" PRIu64 ", read from the record %" PRIu64 "\n",
              c.sent, c.publish_errors, c.decided, c.late, c.errors, c.timeouts,
              c.lost, c.duplicates, c.repeats, c.double_runs, c.recovered);
}

int run_load(const load_flags& f) {
  const harness::open_loop_options& lo = f.loop;
  if (auto st = check_prefix(f.prefix); !st) {
    log::error(st.err().message);
    return 2;
  }
  if (lo.blocks == 0 || lo.block_tokens == 0 || lo.prefixes == 0 ||
      !(lo.rate > 0) || !(lo.duration_s > 0)) {
    log::error(
        "--rate, --duration-s, --blocks, --block-tokens and --prefixes must "
        "be positive");
    return 2;
  }
  nats_options no;
  no.url = f.nats;
  no.name = "kvmesh-load";
  auto bus = nats_bus::connect(no);
  if (!bus) {
    log::error(bus.err().message);
    return 1;
  }
  subjects subj;
  subj.prefix = f.prefix;
  auto loop = harness::open_loop::open(**bus, subj, lo);
  if (!loop) {
    log::error(loop.err().message);
    return 1;
  }
  std::signal(SIGINT, [](int) { interrupted = true; });
  std::signal(SIGTERM, [](int) { interrupted = true; });
  if (auto st = (*loop)->run(interrupted); !st) {
    log::error(st.err().message);
    return 1;
  }
  const auto [counts, outcomes] = (*loop)->tally(harness::wall_ms());
  write_lines(f.out, outcomes);
  print_counts(counts, f);
  return 0;
}

}  // namespace

void add_load(CLI::App& app, std::function<int()>& run) {
  auto f = std::make_shared<load_flags>();
  auto* cmd = app.add_subcommand(
      "load",
      "send route requests to a running mesh at a fixed rate (open loop, "
      "unique ids) and count what became of each: decided, refused, timed "
      "out, never answered, decided twice, run twice by the engines");
  cmd->add_option("--nats", f->nats,
                  "NATS server URL, or a comma-separated list of one "
                  "cluster's servers")
      ->required();
  cmd->add_option("--prefix", f->prefix, "subject prefix of the mesh")
      ->capture_default_str();
  cmd->add_option("--rate", f->loop.rate, "requests per second")
      ->capture_default_str();
  cmd->add_option("--duration-s", f->loop.duration_s, "send for this long")
      ->capture_default_str();
  cmd->add_option("--drain-s", f->loop.drain_s,
                  "then wait this long for late answers and engine events")
      ->capture_default_str();
  cmd->add_option("--timeout-ms", f->loop.timeout_ms,
                  "a request unanswered for this long counts as a timeout, "
                  "as a client would report it")
      ->capture_default_str();
  cmd->add_flag("--durable", f->loop.durable,
                "send through the durable JetStream queue");
  cmd->add_option("--publish-window", f->loop.publish_window,
                  "durable requests sent at once before the server's acks "
                  "(1: each waits for its ack, one round trip a request)")
      ->check(CLI::Range(1u, 65536u))
      ->capture_default_str();
  cmd->add_option("--block-tokens", f->loop.block_tokens,
                  "tokens per block, as the mesh's workers have it")
      ->capture_default_str();
  cmd->add_option("--blocks", f->loop.blocks, "blocks per prompt")
      ->capture_default_str();
  cmd->add_option("--prefixes", f->loop.prefixes,
                  "distinct shared prefixes (every block but the last)")
      ->capture_default_str();
  cmd->add_option("--output-tokens", f->loop.output_tokens,
                  "expected output length of each request")
      ->capture_default_str();
  cmd->add_option("--out", f->out,
                  "write one JSON line per request: its times and answers");
  cmd->add_option("--stop-file", f->loop.stop_file,
                  "stop sending early once this file exists");
  cmd->add_flag("--json", f->json, "print the counts as JSON");
  cmd->footer(
      "lost: accepted by NATS, never answered. duplicates: decided for more "
      "than one worker. repeats: the same decision answered again. read from "
      "the record: durable answers missed (sent while this client was "
      "reconnecting) and read from the routers' decision records.");
  cmd->callback([f, &run] { run = [f] { return run_load(*f); }; });
}

}  // namespace kvmesh::cli
