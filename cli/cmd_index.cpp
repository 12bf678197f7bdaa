// `kvmesh index`: an index shard's flags, its node started and served.
#include <malloc.h>

#include <memory>
#include <string>

#include "cli/commands.hpp"
#include "cli/mesh_flags.hpp"

namespace kvmesh::cli {

namespace {

struct index_flags {
  bus_flags bus;
  metrics_flags metrics;
  uint32_t threads = 0;  // the actor system's; 0: one per core
  wire_limits limits;
  std::string shard;
  std::string db;
  uint32_t heartbeat_ms = 1000;
};

int run_index(const index_flags& f) {
  const char* cmd = "index";
  set_wire_limits(f.limits);
  if (auto why = check_bus_flags(f.bus); !why.empty())
    return usage_error(cmd, why);
  auto shard = parse_shard(f.shard);
  if (!shard) return usage_error(cmd, shard.err().message);
  log::set_proc("index shard-" + std::to_string(shard->first));
  if (f.db.empty()) return usage_error(cmd, "--db: the directory is empty");
  shard_node_options so;
  so.mesh = make_mesh_options(f.bus.prefix, f.heartbeat_ms);
  so.shard.shard = shard->first;
  so.shard.dir = f.db;
  so.shards = shard->second;
  // The shard's change lists and RocksDB's SST builders are megabytes that
  // come and go every second from threads of their own. glibc's dynamic
  // mmap threshold then serves them from its heaps, each thread's arena a
  // heap of its own, and the RSS crept over a 30-minute soak with the
  // index's size constant. A fixed threshold hands every such buffer back
  // when freed, and two arenas leave fewer heaps to fragment.
  mallopt(M_MMAP_THRESHOLD, 256 * 1024);
  mallopt(M_ARENA_MAX, 2);
  const std::string name = "index-" + std::to_string(shard->first);
  auto p = start_process(f.bus, f.metrics, f.threads, name,
                         [&] { return process_metrics::for_shard(so); });
  if (!p) return start_error(cmd, p.err());
  auto node = shard_node::start(*p->sys, *p->bus, so);
  if (!node) return start_error(cmd, "--db " + f.db, node.err());
  p->watch(**node);
  KVMESH_INFO("shard %u/%u (RocksDB %s) serves on %s, prefix %s", shard->first,
              shard->second, f.db.c_str(), p->url.c_str(),
              f.bus.prefix.c_str());
  return p->serve(*node);
}

}  // namespace

void add_index(CLI::App& app, std::function<int()>& run) {
  auto f = std::make_shared<index_flags>();
  auto* cmd = app.add_subcommand(
      "index",
      "run an index shard: which worker holds which blocks, fed by KV events "
      "and kept in RocksDB, queried by routers; until SIGINT/SIGTERM");
  add_bus_flags(*cmd, f->bus);
  add_metrics_flags(*cmd, f->metrics);
  add_threads_flag(*cmd, f->threads);
  add_limit_flags(*cmd, f->limits);
  cmd->add_option("--shard", f->shard,
                  "I/N: this is shard I (from 0) of an index of N shards")
      ->required();
  cmd->add_option("--db", f->db, "RocksDB directory (created when missing)")
      ->required();
  cmd->add_option("--heartbeat-ms", f->heartbeat_ms,
                  "push this shard's status this often")
      ->check(positive)
      ->capture_default_str();
  cmd->callback([f, &run] { run = [f] { return run_index(*f); }; });
}

}  // namespace kvmesh::cli
