// The INDEX SHARD actor: one shard's block map, queried by routers and fed
// by workers' KV events, persisted through storage/block_store.
#pragma once

#include <memory>
#include <string>

#include "actors/actors.hpp"
#include "core/block_index.hpp"

namespace kvmesh {

class block_store;

struct index_shard_options {
  uint32_t shard = 0;
  std::string dir;     // RocksDB directory; empty: memory only
  bool create = true;  // create the directory when missing
  // How long changes wait before they are written, together: longer
  // coalesces more churn, and a crash loses more from disk (which the
  // workers' re-announce restores).
  caf::timespan persist_every = std::chrono::milliseconds(1000);
};

// The shard's data, opened before the actor exists so that a bad directory
// is an error value.
struct shard_data {
  block_index index;                   // declared first: the store uses it
  std::unique_ptr<block_store> store;  // null when memory only
  ~shard_data();
};

struct index_shard_state {
  static inline const char* name = "index_shard";
  uint32_t shard = 0;
  std::shared_ptr<shard_data> data;
  uint64_t events = 0;
  uint64_t errors = 0;
  uint32_t workers = 0;  // 1 + the largest worker id seen
  caf::timespan persist_every{};
  bool persisting = false;  // a persist is scheduled
  std::vector<tier_match> scratch;
};

index_shard_actor::behavior_type index_shard(
    index_shard_actor::stateful_pointer<index_shard_state> self, uint32_t shard,
    std::shared_ptr<shard_data> data, caf::timespan persist_every);

// Opens (or creates) the shard's store and spawns the actor; a missing or
// corrupted directory is an error naming it.
expected<index_shard_actor> spawn_index_shard(caf::actor_system& sys,
                                              const index_shard_options& opt);

}  // namespace kvmesh
