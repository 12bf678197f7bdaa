// `kvmesh admin`: the ADMIN's verbs called on a running mesh, answers printed.
#include <cmath>
#include <cstdio>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "cli/commands.hpp"
#include "cli/mesh_flags.hpp"
#include "cli/report.hpp"
#include "core/block_hash.hpp"
#include "core/pricing.hpp"

namespace kvmesh::cli {

namespace {

// A worker's models in one cell: "a,b" (adapters by their own name); "-"
// for none.
std::string models_cell(const std::vector<served_model>& models) {
  std::string out;
  for (const auto& m : models)
    out += (out.empty() ? "" : ",") + m.name;
  return out.empty() ? "-" : out;
}

struct admin_flags {
  bus_flags bus;
  bool json = false;
  uint32_t timeout_ms = default_timeout_ms;
  std::string verb;  // the subject's verb (subjects::admin)
  uint32_t worker = 0;
  uint32_t block_tokens = default_block_tokens;
  std::string tokens;
  price_config weights;  // weights set: the values given
  std::vector<std::pair<CLI::Option*, double price_config::*>> weight_opts;
};

// The answer to verb `v` as `--json` prints it.
json admin_json(const std::string& v, const admin_reply& r) {
  json out;
  if (v == "workers") {
    out = {{"workers", workers_json(r.workers)}};
  } else if (v == "routers") {
    out = {{"routers", routers_json(r.routers)}};
  } else if (v == "shards") {
    json list = json::array();
    for (const auto& s : r.shards)
      list.push_back({{"shard", s.shard},
                      {"shards", s.shards},
                      {"blocks", s.blocks},
                      {"entries", s.entries},
                      {"disk_bytes", s.disk_bytes},
                      {"events", s.events},
                      {"errors", s.errors},
                      {"refused_events", s.refused_events}});
    out = {{"shards", list}};
  } else if (v == "prefix") {
    json list = json::array();
    for (const auto& h : r.holders)
      list.push_back({{"worker", h.worker},
                      {"gpu", h.gpu},
                      {"host", h.host},
                      {"disk", h.disk}});
    out = {{"holders", list}};
  } else if (v == "weights.get") {
    const price_config& w = r.weights;
    out = {{"weights",
            {{"c_host", w.c_host},
             {"c_disk", w.c_disk},
             {"beta", w.beta},
             {"k", w.k},
             {"overflow", w.overflow},
             {"overload_ceiling", w.overload_ceiling}}}};
  } else {
    out = {{"ok", true}, {"count", r.count}};
  }
  return out;
}

// The answer as a person reads it: a table, or one line for a verb that
// changes something.
void print_admin(const admin_flags& f, const admin_reply& r) {
  const std::string& v = f.verb;
  if (f.json) {
    std::printf("%s\n", admin_json(v, r).dump().c_str());
    return;
  }
  table rows;
  if (v == "workers") {
    rows.push_back({"worker", "state", "agent", "gpu", "host", "disk", "queued",
                    "reserved", "active", "capacity", "waiting", "running",
                    "completed", "awards", "last_price", "speed", "models",
                    "endpoint"});
    for (const auto& w : r.workers)
      rows.push_back({std::to_string(w.worker), worker_state_name(w), w.agent,
                      std::to_string(w.gpu_blocks),
                      std::to_string(w.host_blocks),
                      std::to_string(w.disk_blocks), fixed(w.queued, 1),
                      fixed(w.reserved, 1), std::to_string(w.active),
                      std::to_string(w.capacity), std::to_string(w.waiting),
                      std::to_string(w.running), std::to_string(w.completed),
                      std::to_string(w.awards),
                      std::isnan(w.last_price) ? "-" : fixed(w.last_price, 1),
                      general(w.speed), models_cell(w.models), w.endpoint});
  } else if (v == "routers") {
    // Re-auctions by cause after their total (kvmesh.capnp's RouterStatus).
    rows.push_back({"router", "decisions", "reauctions", "refused",
                    "unanswered", "no_bids", "saturated", "no_live",
                    "bids/round", "runner_ups", "held", "overloaded",
                    "live_workers", "workers", "text_requests"});
    for (const auto& x : r.routers)
      rows.push_back(
          {x.name, std::to_string(x.decisions), std::to_string(x.reauctions),
           std::to_string(x.reauctions_refused),
           std::to_string(x.reauctions_unanswered),
           std::to_string(x.reauctions_no_bids),
           std::to_string(x.reauctions_saturated),
           std::to_string(x.reauctions_no_live_worker),
           x.rounds ? fixed(static_cast<double>(x.bids) / x.rounds, 1) : "-",
           std::to_string(x.runner_up_awards), std::to_string(x.held),
           std::to_string(x.overloaded), std::to_string(x.live_workers),
           std::to_string(x.workers), std::to_string(x.text_requests)});
  } else if (v == "shards") {
    rows.push_back(
        {"shard", "blocks", "entries", "disk_bytes", "events", "errors"});
    for (const auto& s : r.shards)
      rows.push_back({std::to_string(s.shard) + "/" + std::to_string(s.shards),
                      std::to_string(s.blocks), std::to_string(s.entries),
                      std::to_string(s.disk_bytes), std::to_string(s.events),
                      std::to_string(s.errors)});
  } else if (v == "prefix") {
    if (r.holders.empty()) {
      std::printf("no worker holds this prefix\n");
      return;
    }
    rows.push_back({"worker", "gpu", "host", "disk"});
    for (const auto& h : r.holders)
      rows.push_back({std::to_string(h.worker), std::to_string(h.gpu),
                      std::to_string(h.host), std::to_string(h.disk)});
  } else if (v == "weights.get") {
    const price_config& w = r.weights;
    rows = {{"weight", "value"},
            {"c_host", general(w.c_host)},
            {"c_disk", general(w.c_disk)},
            {"beta", general(w.beta)},
            {"k", general(w.k)},
            {"overflow", general(w.overflow)},
            {"overload_ceiling", general(w.overload_ceiling)}};
  } else if (v == "weights.set") {
    std::printf("weights set (count %u)\n", r.count);
    return;
  } else {
    std::printf("%s worker %u: ok (count %u)\n", v.c_str(), f.worker, r.count);
    return;
  }
  print_columns(rows);
}

int run_admin(const admin_flags& f) {
  const char* cmd = "admin";
  if (auto why = check_bus_flags(f.bus); !why.empty())
    return usage_error(cmd, why);
  if (f.verb.empty())
    return usage_error(cmd,
                       "which verb? workers, routers, shards, prefix, "
                       "weights [set], drain ID, undrain ID");
  admin_request req;
  if (f.verb == "prefix") {
    auto tokens = parse_token_list(f.tokens);
    if (!tokens) return usage_error(cmd, tokens.err().message);
    auto chain = token_chain(*tokens, f.block_tokens, "");
    if (!chain) return usage_error(cmd, chain.err().message);
    if (chain->empty())
      return usage_error(cmd, "--tokens: " + std::to_string(tokens->size()) +
                                  " tokens make no full block of " +
                                  std::to_string(f.block_tokens) +
                                  " (--block-tokens): no prefix to look up");
    req.chain = std::move(*chain);
  } else if (f.verb == "drain" || f.verb == "undrain") {
    req.worker = f.worker;
    req.on = f.verb == "drain";
  }
  auto bus = connect_bus(f.bus, "kvmesh-admin");
  if (!bus) return run_error(cmd, bus.err().message);
  subjects subj;
  subj.prefix = f.bus.prefix;
  const std::chrono::milliseconds timeout(f.timeout_ms);
  auto call = [&](const std::string& verb,
                  const admin_request& q) -> expected<admin_reply> {
    auto r = admin_request_call(**bus, subj, verb, q, timeout);
    if (!r) return make_error(r.err().code, verb + ": " + r.err().message);
    if (!r->error.empty())
      return make_error(ec::invalid_argument, verb + ": " + r->error);
    return r;
  };
  if (f.verb == "weights.set") {
    // Weights not given keep their value: read them all, change some.
    auto current = call("weights.get", admin_request{});
    if (!current) return run_error(cmd, current.err().message);
    req.weights = current->weights;
    for (const auto& [opt, field] : f.weight_opts)
      if (opt->count() > 0) req.weights.*field = f.weights.*field;
    // The routers would refuse it too; a value out of its range is this
    // command line's mistake.
    if (auto st = validate(req.weights); !st)
      return usage_error(cmd, st.err().message);
  }
  auto r = call(f.verb, req);
  if (!r) return run_error(cmd, r.err().message);
  print_admin(f, *r);
  return 0;
}

}  // namespace

void add_admin(CLI::App& app, std::function<int()>& run) {
  auto f = std::make_shared<admin_flags>();
  auto* cmd = app.add_subcommand(
      "admin",
      "inspect and steer a running mesh: list workers, routers and index "
      "shards, show a prefix's holders, get or set price weights, drain a "
      "worker");
  add_bus_flags(*cmd, f->bus);
  cmd->add_flag("--json", f->json, "print the answer as JSON");
  cmd->add_option("--timeout-ms", f->timeout_ms, "wait this long for an answer")
      ->check(positive)
      ->capture_default_str();
  // A missing verb is checked in run_admin: CLI11 would call an unknown one
  // a missing subcommand.
  cmd->require_subcommand(0, 1);
  cmd->footer(
      "Exit status: 0 done, 1 no answer or an error answer (on stderr), 2 bad "
      "flag or value.");
  // The admin's flags may follow the verb: `admin workers --json`.
  auto verb = [&](const char* name, const char* wire, const char* help) {
    auto* v = cmd->add_subcommand(name, help);
    v->fallthrough();
    v->callback([f, wire] {
      // `weights set` sets its verb before `weights` runs its callback.
      if (f->verb.empty()) f->verb = wire;
    });
    return v;
  };
  verb("workers", "workers", "every worker's state, load and tiers");
  verb("routers", "routers", "every router's counters");
  verb("shards", "shards", "every index shard's size and counters");
  auto* prefix = verb("prefix", "prefix",
                      "which workers hold how much of a prompt's prefix, per "
                      "tier");
  prefix
      ->add_option("--block-tokens", f->block_tokens,
                   "tokens per block, as the mesh's workers have it")
      ->check(positive)
      ->capture_default_str();
  prefix->add_option("--tokens", f->tokens, "the prompt's token ids: 1,2,3")
      ->required();
  auto* weights =
      verb("weights", "weights.get", "the routers' price weights; `set` them");
  weights->require_subcommand(0, 1);
  auto* set = weights->add_subcommand(
      "set", "set price weights on every router; those not given keep theirs");
  set->fallthrough();
  set->callback([f] { f->verb = "weights.set"; });
  price_config& w = f->weights;
  struct weight_flag {
    const char* flag;
    double price_config::*field;
    const char* help;
    bool unit;  // a credit: from 0 to 1
  };
  const weight_flag flags[] = {
      {"--c-host", &price_config::c_host, "credit of a host-memory block",
       true},
      {"--c-disk", &price_config::c_disk, "credit of a disk block", true},
      {"--beta", &price_config::beta, "weight of occupancy", false},
      {"--k", &price_config::k, "GPU credit decay with excess queue", false},
      {"--overflow", &price_config::overflow, "price per block beyond capacity",
       false},
      {"--ceiling", &price_config::overload_ceiling,
       "saturation price per request block (0: never)", false}};
  for (const auto& wf : flags) {
    auto* opt = set->add_option(wf.flag, w.*wf.field, wf.help);
    if (wf.unit)
      opt->check(credit);
    else
      opt->check(non_negative);
    f->weight_opts.emplace_back(opt, wf.field);
  }
  auto* drain = verb("drain", "drain",
                     "stop awarding requests to worker ID (it finishes what "
                     "it has)");
  drain->add_option("ID", f->worker, "worker id")->required();
  auto* undrain =
      verb("undrain", "undrain", "let worker ID win auctions again");
  undrain->add_option("ID", f->worker, "worker id")->required();
  cmd->callback([f, &run] { run = [f] { return run_admin(*f); }; });
}

}  // namespace kvmesh::cli
