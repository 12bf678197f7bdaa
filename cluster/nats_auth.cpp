// nats-server's authorization block for kvmesh's roles.
#include "cluster/nats_auth.hpp"

#include <set>

#include "cluster/durable_intake.hpp"
#include "core/args.hpp"

namespace kvmesh {

namespace {

// The file with @P@ (the prefix), @ROUTE@ (the durable stream), @AGENTS@
// (the agents' permissions) and @USERS@ (their user lines) to fill in.
constexpr const char* conf_template =
    R"(# nats-server users for kvmesh's roles, each allowed only the subjects its
# role uses (prefix `@P@`, docs/wire.md), so that a client can only route,
# an agent only bid and report, and only `admin` can change weights or
# drain. Include it from the server's config:
#
#   jetstream { store_dir: /var/lib/nats }   # for routers' --durable
#   include ./auth.conf
#
# Made by `kvmesh config nats-auth` (@ARGS@); run it again for
# another --prefix or to give each node agent a user of its own (--agent
# NAME, once per agent), which binds the agent's name to its credential.
# Passwords come from the server's environment (nats-server reads $NAME
# from it when the file does not set NAME); put a bcrypt hash (`htpasswd
# -bnBC 11 "" PASS`) in their place to keep clear text off the server.
# Why each subject is here: docs/reliability.md, "Credentials, TLS and
# subject permissions".

authorization {
  # Routes requests: core request/reply and the durable (JetStream) queue,
  # whose stream the routers create. A durable client also reads the
  # decisions bucket, where the routers keep each answer before sending it
  # (the one it missed while reconnecting is read there): the bucket's
  # stream info (to bind) and direct gets of its keys, nothing else (no
  # write, no claims). Replies come on inboxes; the mesh's own inboxes
  # (_INBOX.@P@., where bids and index answers travel) are not a
  # client's to read.
  CLIENT = {
    publish = {
      allow = ["@P@.route", "@P@.route.json", "@P@.route.durable.>",
               "$JS.API.STREAM.INFO.@ROUTE@",
               "$JS.API.STREAM.INFO.KV_@ROUTE@_DECISIONS",
               "$JS.API.DIRECT.GET.KV_@ROUTE@_DECISIONS.$KV.@ROUTE@_DECISIONS.>"]
    }
    subscribe = {
      allow = ["_INBOX.>"]
      deny = ["_INBOX.@P@.>"]
    }
  }
@AGENTS@
  # A router process: serves route requests and the ADMIN's verbs, runs
  # auctions (agents' and shards' subjects), fans weights out to the other
  # routers, drains workers on the ADMIN's behalf, and pulls the durable
  # queue (JetStream API, acks), keeping answers and claims in its buckets.
  ROUTER = {
    publish = {
      allow = ["@P@.agent.>", "@P@.index.>", "@P@.heartbeat.router",
               "@P@.router.>", "_INBOX.>",
               "$JS.API.STREAM.INFO.@ROUTE@",
               "$JS.API.STREAM.CREATE.@ROUTE@",
               "$JS.API.CONSUMER.INFO.@ROUTE@.@CONSUMER@",
               "$JS.API.CONSUMER.CREATE.@ROUTE@.>",
               "$JS.API.CONSUMER.DURABLE.CREATE.@ROUTE@.@CONSUMER@",
               "$JS.API.CONSUMER.MSG.NEXT.@ROUTE@.@CONSUMER@",
               "$JS.ACK.@ROUTE@.@CONSUMER@.>",
               "$JS.API.STREAM.INFO.KV_@ROUTE@_DECISIONS",
               "$JS.API.STREAM.CREATE.KV_@ROUTE@_DECISIONS",
               "$JS.API.STREAM.MSG.GET.KV_@ROUTE@_DECISIONS",
               "$JS.API.DIRECT.GET.KV_@ROUTE@_DECISIONS.>",
               "$KV.@ROUTE@_DECISIONS.>",
               "$JS.API.STREAM.INFO.KV_@ROUTE@_CLAIMS",
               "$JS.API.STREAM.CREATE.KV_@ROUTE@_CLAIMS",
               "$JS.API.STREAM.MSG.GET.KV_@ROUTE@_CLAIMS",
               "$JS.API.DIRECT.GET.KV_@ROUTE@_CLAIMS.>",
               "$KV.@ROUTE@_CLAIMS.>"]
    }
    subscribe = {
      allow = ["@P@.route", "@P@.route.json", "@P@.heartbeat.>",
               "@P@.router.>", "@P@.admin.>", "_INBOX.>"]
    }
  }

  # An index shard: KV batches and queries in, heartbeats and answers out;
  # workers' heartbeats tell it which agent holds each worker's entries.
  INDEX = {
    publish = {
      allow = ["@P@.heartbeat.shard", "_INBOX.@P@.>"]
    }
    subscribe = {
      allow = ["@P@.kv.>", "@P@.index.>", "@P@.heartbeat.worker.*"]
    }
  }

  # The gateway (`kvmesh gateway`): hears the workers' heartbeats (the
  # models they serve, their fronts and engines), sends route requests, and
  # reads their decisions on its own inboxes (_INBOX.gateway.<name>.<n>,
  # and _INBOX.gateway.<name>.<thread>.<n> for each HTTP thread's own
  # connection); the requests themselves go to the engines (or the fronts)
  # over HTTP, and their progress to the agents.
  GATEWAY = {
    publish = {
      allow = ["@P@.route", "@P@.agent.*.progress"]
    }
    subscribe = {
      allow = ["@P@.heartbeat.worker.*", "_INBOX.gateway.*.*",
               "_INBOX.gateway.*.*.*"]
    }
  }

  # An operator (`kvmesh admin`, `kvmesh top`): every ADMIN verb, the
  # mutating ones (weights.set, drain, undrain) included; may route as a
  # client does (the decisions bucket read only), and follow heartbeats
  # and request events. Not the mesh's own inboxes, as for a client.
  ADMIN = {
    publish = {
      allow = ["@P@.admin.>", "@P@.route", "@P@.route.json",
               "@P@.route.durable.>", "$JS.API.STREAM.INFO.@ROUTE@",
               "$JS.API.STREAM.INFO.KV_@ROUTE@_DECISIONS",
               "$JS.API.DIRECT.GET.KV_@ROUTE@_DECISIONS.$KV.@ROUTE@_DECISIONS.>"]
    }
    subscribe = {
      allow = ["_INBOX.>", "@P@.heartbeat.>", "@P@.events"]
      deny = ["_INBOX.@P@.>"]
    }
  }

  # Looks, changes nothing (`kvmesh top`, `kvmesh admin workers|routers|
  # shards|prefix|weights`, dashboards): the ADMIN's read verbs only, and
  # not the mesh's own inboxes.
  MONITOR = {
    publish = {
      allow = ["@P@.admin.workers", "@P@.admin.routers",
               "@P@.admin.shards", "@P@.admin.prefix",
               "@P@.admin.weights.get"]
    }
    subscribe = {
      allow = ["_INBOX.>", "@P@.heartbeat.>", "@P@.events"]
      deny = ["_INBOX.@P@.>"]
    }
  }

  users = [
    {user: client, password: $KVMESH_CLIENT_PASSWORD, permissions: $CLIENT}
@USERS@    {user: router, password: $KVMESH_ROUTER_PASSWORD, permissions: $ROUTER}
    {user: index, password: $KVMESH_INDEX_PASSWORD, permissions: $INDEX}
    {user: gateway, password: $KVMESH_GATEWAY_PASSWORD, permissions: $GATEWAY}
    {user: admin, password: $KVMESH_ADMIN_PASSWORD, permissions: $ADMIN}
    {user: monitor, password: $KVMESH_MONITOR_PASSWORD, permissions: $MONITOR}
  ]
}
)";

constexpr const char* shared_agent = R"(
  # A node agent: hears calls for bids, awards, releases and drains (alone
  # or batched) and shards' heartbeats; answers into the callers' inboxes,
  # reports workers' heartbeats, KV events and request events. An agent's
  # heartbeats and KV events travel on subjects that carry its name
  # (@P@.heartbeat.worker.<agent>, @P@.kv.<shard>.<agent>[.batch]), and
  # routers and shards hold each message to that name, but this shared
  # user may speak for any agent: give each agent a user of its own
  # (`kvmesh config nats-auth --agent NAME`) to bind names to credentials.
  AGENT = {
    publish = {
      allow = ["@P@.heartbeat.worker.*", "@P@.kv.>", "@P@.events",
               "_INBOX.@P@.>"]
    }
    subscribe = {
      allow = ["@P@.agent.>", "@P@.heartbeat.shard", "_INBOX.@P@.>"]
    }
  }
)";

constexpr const char* own_agent = R"(
  # Node agent @NAME@'s own user: only its heartbeats and KV events, its
  # calls and its own inbox (_INBOX.@P@.@NAME@.>), and replies into the
  # routers' inboxes.
  AGENT_@TOKEN@ = {
    publish = {
      allow = ["@P@.heartbeat.worker.@NAME@", "@P@.kv.*.@NAME@",
               "@P@.kv.*.@NAME@.batch", "@P@.events",
               "_INBOX.@P@.>"]
    }
    subscribe = {
      allow = ["@P@.agent.@NAME@.>", "@P@.heartbeat.shard",
               "_INBOX.@P@.@NAME@.>"]
    }
  }
)";

void replace_all(std::string& s, const std::string& from,
                 const std::string& to) {
  for (size_t at = s.find(from); at != std::string::npos;
       at = s.find(from, at + to.size()))
    s.replace(at, from.size(), to);
}

}  // namespace

expected<std::string> nats_auth_conf(const nats_auth_options& o) {
  if (auto st = check_prefix(o.subj.prefix); !st) return st.err();
  std::string agents, users, args;
  if (o.agents.empty() || o.shared_agent) {
    agents += shared_agent;
    users +=
        "    {user: agent, password: $KVMESH_AGENT_PASSWORD, "
        "permissions: $AGENT}\n";
  }
  std::set<std::string> tokens;
  for (const auto& name : o.agents) {
    if (auto st = check_agent_name(name); !st) return st.err();
    const std::string token = upper_token(name);
    if (!tokens.insert(token).second)
      return make_error(ec::invalid_argument,
                        "agent names clash: '" + name +
                            "' needs the variable KVMESH_AGENT_" + token +
                            "_PASSWORD, as another agent named does");
    std::string block = own_agent;
    replace_all(block, "@NAME@", name);
    replace_all(block, "@TOKEN@", token);
    agents += block;
    users += "    {user: " + name + ", password: $KVMESH_AGENT_" + token +
             "_PASSWORD, permissions: $AGENT_" + token + "}\n";
    args += " --agent " + name;
  }
  if (o.shared_agent && !o.agents.empty()) args += " --shared-agent";
  if (o.subj.prefix != subjects{}.prefix)
    args = " --prefix " + o.subj.prefix + args;
  std::string text = conf_template;
  replace_all(text, "@ARGS@", args.empty() ? "no flags" : "flags:" + args);
  replace_all(text, "@AGENTS@", agents);
  replace_all(text, "@USERS@", users);
  const auto q = durable_queue(o.subj);
  replace_all(text, "@ROUTE@", q.stream);
  replace_all(text, "@CONSUMER@", q.consumer);
  replace_all(text, "@P@", o.subj.prefix);
  return text;
}

}  // namespace kvmesh
