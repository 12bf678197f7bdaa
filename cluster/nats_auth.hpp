// nats-server's authorization block for kvmesh's roles (deploy/nats/auth.conf
// is its output for the default prefix): a user per role, and optionally a
// user per node agent that may speak only for that agent's subjects.
#pragma once

#include <string>
#include <vector>

#include "cluster/subjects.hpp"
#include "core/error.hpp"

namespace kvmesh {

struct nats_auth_options {
  subjects subj;
  // Agents given a user of their own (user name = agent name, password in
  // $KVMESH_AGENT_<NAME>_PASSWORD); none: the shared `agent` user only.
  std::vector<std::string> agents;
  // Keep the shared `agent` user beside per-agent ones (while moving a
  // fleet over).
  bool shared_agent = false;
};

// The file's text, or an error naming a bad or clashing agent name.
expected<std::string> nats_auth_conf(const nats_auth_options& o);

}  // namespace kvmesh
