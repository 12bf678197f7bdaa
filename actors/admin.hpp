// The ADMIN actor: the operators' view of the mesh and their controls.
#pragma once

#include <vector>

#include "actors/actors.hpp"

namespace kvmesh {

struct admin_options {
  std::vector<worker_actor> workers;
  std::vector<router_actor> routers;
  std::vector<index_shard_actor> shards;
  caf::timespan deadline = std::chrono::seconds(2);
};

struct admin_state {
  static inline const char* name = "admin";
  admin_options opt;
};

admin_actor::behavior_type admin(
    admin_actor::stateful_pointer<admin_state> self, admin_options opt);

}  // namespace kvmesh
