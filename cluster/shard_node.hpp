// The index shard's process: one INDEX SHARD served on NATS (KV events in,
// queries answered) and its heartbeat.
#pragma once

#include <caf/all.hpp>

#include <memory>

#include "actors/actors.hpp"
#include "actors/index_shard.hpp"
#include "cluster/meters.hpp"
#include "cluster/nats.hpp"
#include "cluster/subjects.hpp"
#include "core/error.hpp"

namespace kvmesh {

struct shard_node_options {
  mesh_options mesh;
  index_shard_options shard;  // shard index, RocksDB directory
  uint32_t shards = 1;        // how many shards the index has
  // Where the front counts the queries it answers; null: not counted.
  std::shared_ptr<const shard_meters> meters;
};

class shard_node {
 public:
  static expected<std::unique_ptr<shard_node>> start(
      caf::actor_system& sys, nats_bus& bus, const shard_node_options& opt);
  ~shard_node();
  index_shard_actor shard() const;

  struct impl;

 private:
  explicit shard_node(std::unique_ptr<impl> p);
  std::unique_ptr<impl> impl_;
};

}  // namespace kvmesh
