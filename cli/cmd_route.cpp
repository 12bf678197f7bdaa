// `kvmesh route`: one request routed through the mesh, its decision printed.
#include <cstdint>
#include <cstdio>
#include <memory>
#include <random>
#include <string>

#include "cli/commands.hpp"
#include "cli/mesh_flags.hpp"
#include "core/block_hash.hpp"
#include "messages/json.hpp"

namespace kvmesh::cli {

namespace {

struct route_flags {
  bus_flags bus;
  bool durable = false;
  std::string request_id;  // the client's own id (clientId)
  CLI::Option* request_id_opt = nullptr;
  uint32_t timeout_ms = default_timeout_ms;
  uint32_t block_tokens = default_block_tokens;
  std::string tokens;
  std::string text;
  CLI::Option* tokens_opt = nullptr;
  CLI::Option* text_opt = nullptr;
  std::string salt;
  uint32_t output_tokens = 0;
  std::string model;
  bool json = false;
};

// 63 bits, so that ids stay positive for clients with signed integers.
uint64_t random_request_id() {
  std::random_device rd;
  const uint64_t v = (uint64_t{rd()} << 32) ^ rd();
  return v & 0x7fffffffffffffffull;
}

void print_decision(const decision& d) {
  std::printf("%s -> worker %u%s%s (%u auction%s)\n",
              request_name(d.request, d.client_id).c_str(), d.worker,
              d.endpoint.empty() ? "" : " at ", d.endpoint.c_str(), d.auctions,
              d.auctions == 1 ? "" : "s");
  if (d.prices.empty()) return;
  table rows{{"won", "worker", "read", "credit_gpu", "credit_host",
              "credit_disk", "space", "speed", "overflow", "wait", "price",
              "delta"}};
  for (const auto& p : d.prices)
    rows.push_back({p.worker == d.worker ? "*" : "", std::to_string(p.worker),
                    fixed(p.read), fixed(p.credit_gpu), fixed(p.credit_host),
                    fixed(p.credit_disk), fixed(p.space), general(p.speed),
                    fixed(p.overflow), fixed(p.wait), fixed(p.price),
                    fixed(p.delta)});
  print_columns(rows);
}

// Why a route request got no decision, for a person: the router's reason
// (it names the request) or the bus's, with what to check where the reason
// alone does not say. libnats' texts are matched because nats_bus reports
// every failed request as an io_error.
std::string route_failure(const route_flags& f, const subjects& subj,
                          const route_request_msg& r, const error& e) {
  const std::string name = request_name(r);
  const std::string& why = e.message;
  const std::string subject = f.durable ? subj.route_durable() : subj.route();
  auto ends_with = [&](const std::string& tail) {
    return why.size() >= tail.size() &&
           why.compare(why.size() - tail.size(), tail.size(), tail) == 0;
  };
  const bool no_responders =
      why.find("No responders available") != std::string::npos;
  // Durable: nobody answers JetStream's API on a server without it.
  if (f.durable && no_responders)
    return name + ": " + why +
           (why.find("JetStream is not enabled") != std::string::npos
                ? ""
                : " (the durable queue needs JetStream: is nats-server "
                  "running with -js?)");
  if (no_responders)
    return name + ": no router serves " + subject +
           " (is a router running on this NATS server with --prefix " +
           subj.prefix + "?)";
  if (e.code == ec::io_error && ends_with(": Timeout"))
    return name + ": no decision within " + std::to_string(f.timeout_ms) +
           " ms from the routers on " + subject;
  std::string msg = why;
  if (msg.find("request " + std::to_string(r.id)) == std::string::npos)
    msg = name + ": " + msg;
  if (f.durable && e.code == ec::timeout)
    msg +=
        "; are routers with --durable running on this NATS server with "
        "--prefix " +
        subj.prefix + "?";
  // Every bidder refused the award, in every auction. A worker refuses a
  // prompt of more blocks than its tokens fill at the worker's block size,
  // which a smaller --block-tokens than the agents' makes, and one that
  // does not fit its GPU.
  if (why.find("no worker took request") != std::string::npos)
    msg += " (every worker refused it: check that --block-tokens " +
           std::to_string(f.block_tokens) +
           " matches the agents' --block-tokens, and that " +
           std::to_string(r.input_tokens) + " tokens fit a worker's GPU)";
  return msg;
}

int run_route(const route_flags& f) {
  const char* cmd = "route";
  if (auto why = check_bus_flags(f.bus); !why.empty())
    return usage_error(cmd, why);
  if ((f.tokens_opt->count() > 0) == (f.text_opt->count() > 0))
    return usage_error(cmd, "--tokens or --text: give exactly one");
  if (f.request_id_opt->count() > 0 &&
      (f.request_id.empty() || f.request_id.size() > max_name_bytes))
    return usage_error(
        cmd, "--request-id: 1 to " + std::to_string(max_name_bytes) +
                 " bytes, not " + std::to_string(f.request_id.size()));
  if (f.model.size() > max_name_bytes)
    return usage_error(
        cmd, "--model: at most " + std::to_string(max_name_bytes) + " bytes");
  route_request_msg r;
  // The mesh's own number for it; the client's id travels beside it.
  r.id = random_request_id();
  r.client_id = f.request_id;
  r.output_tokens = f.output_tokens;
  r.block_tokens = f.block_tokens;  // the router refuses another size
  r.model = f.model;
  if (f.text_opt->count() > 0) {
    // No tokenizer here: the text's bytes in chunks stand for its blocks.
    auto chain = hash_text_blocks(f.text, f.block_tokens);
    if (f.text.empty()) return usage_error(cmd, "--text is empty");
    if (!chain) return usage_error(cmd, "--text: " + chain.err().message);
    KVMESH_WARN(
        "--text is hashed in chunks of %u bytes, not tokens: the blocks are "
        "approximate and match no engine's cache",
        f.block_tokens * text_bytes_per_token);
    r.blocks = std::move(*chain);
    r.input_tokens = static_cast<uint32_t>(
        (f.text.size() + text_bytes_per_token - 1) / text_bytes_per_token);
  } else {
    auto tokens = parse_token_list(f.tokens);
    if (!tokens) return usage_error(cmd, tokens.err().message);
    auto chain = token_chain(*tokens, f.block_tokens, f.salt);
    if (!chain) return usage_error(cmd, chain.err().message);
    r.blocks = std::move(*chain);
    r.input_tokens = static_cast<uint32_t>(tokens->size());
  }
  auto bus = connect_bus(f.bus, "kvmesh-route");
  if (!bus) return run_error(cmd, bus.err().message);
  subjects subj;
  subj.prefix = f.bus.prefix;
  const std::chrono::milliseconds timeout(f.timeout_ms);
  // Both turn a router's "no decision" reply into an error.
  auto d = f.durable ? route_durable_once(**bus, subj, r, timeout)
                     : route_once(**bus, subj, r, timeout);
  if (!d) return run_error(cmd, route_failure(f, subj, r, d.err()));
  if (f.json)
    std::printf("%s\n", decision_json(*d).c_str());
  else
    print_decision(*d);
  return 0;
}

}  // namespace

void add_route(CLI::App& app, std::function<int()>& run) {
  auto f = std::make_shared<route_flags>();
  auto* cmd = app.add_subcommand(
      "route",
      "route one request through the mesh and print the decision: the "
      "winner and every bidder's price");
  add_bus_flags(*cmd, f->bus);
  cmd->add_flag("--durable", f->durable,
                "send through the durable JetStream queue: stored before a "
                "router takes it, so a router's death loses nothing (needs "
                "nats-server -js and routers started with --durable)");
  f->request_id_opt = cmd->add_option(
      "--request-id", f->request_id,
      "your own id for the request, any string of 1 to 256 bytes (as an "
      "OpenAI client's X-Request-Id): in the routers' log lines about it, "
      "echoed in the decision (client_id) and kept in a durable request's "
      "record. The mesh numbers the request itself (the decision's "
      "request)");
  cmd->add_option("--timeout-ms", f->timeout_ms,
                  "wait this long for a decision")
      ->check(positive)
      ->capture_default_str();
  cmd->add_option("--block-tokens", f->block_tokens,
                  "tokens per block, as the mesh's workers have it")
      ->check(positive)
      ->capture_default_str();
  f->tokens_opt =
      cmd->add_option("--tokens", f->tokens, "the prompt's token ids: 1,2,3");
  f->text_opt = cmd->add_option(
      "--text", f->text,
      "the prompt as text, when its token ids are unknown: hashed in chunks "
      "of block-tokens x 4 bytes (approximate; a warning is printed)");
  cmd->add_option("--salt", f->salt, "salt or LoRA name of the block hashes");
  cmd->add_option("--model", f->model,
                  "the model (or LoRA adapter) it is for: only workers "
                  "serving it bid (default: any worker)");
  cmd->add_option("--output-tokens", f->output_tokens,
                  "expected output length (default: the router estimates)");
  cmd->add_flag("--json", f->json, "print the decision as JSON");
  cmd->footer(
      "Exit status: 0 decided, 1 no decision (the reason on stderr), 2 bad "
      "flag or value.");
  cmd->callback([f, &run] { run = [f] { return run_route(*f); }; });
}

}  // namespace kvmesh::cli
