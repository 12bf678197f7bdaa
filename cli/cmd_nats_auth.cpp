// `kvmesh config nats-auth`: prints nats-server's users and permissions for
// kvmesh's roles (cluster/nats_auth), optionally a user per node agent.
#include <cstdio>
#include <memory>

#include "cli/commands.hpp"
#include "cluster/nats_auth.hpp"

namespace kvmesh::cli {

void add_nats_auth(CLI::App& config, std::function<int()>& run) {
  auto o = std::make_shared<nats_auth_options>();
  auto* cmd = config.add_subcommand(
      "nats-auth",
      "print nats-server's authorization block for kvmesh's roles (include "
      "it from the server's config; deploy/nats/auth.conf is its output "
      "with no flags)");
  cmd->add_option("--prefix", o->subj.prefix, "subject prefix of the mesh")
      ->capture_default_str();
  cmd->add_option("--agent", o->agents,
                  "a node agent given a user of its own, which may publish "
                  "only that agent's heartbeats and KV events (repeat per "
                  "agent; its password in $KVMESH_AGENT_<NAME>_PASSWORD)");
  cmd->add_flag("--shared-agent", o->shared_agent,
                "with --agent: keep the shared `agent` user too, for agents "
                "not yet given their own");
  cmd->callback([o, &run] {
    run = [o] {
      auto text = nats_auth_conf(*o);
      if (!text) {
        std::fprintf(stderr, "kvmesh config nats-auth: %s\n",
                     text.err().message.c_str());
        return 2;
      }
      std::fputs(text->c_str(), stdout);
      return 0;
    };
  });
}

}  // namespace kvmesh::cli
