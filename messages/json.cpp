// JSON route requests and decisions (nlohmann::json), errors naming fields;
// a worker's status.
#include "messages/json.hpp"

#include <atomic>
#include <limits>

#include <nlohmann/json.hpp>

#include "core/block_hash.hpp"
#include "core/json_guard.hpp"
#include "messages/limits.hpp"

namespace kvmesh {

namespace {

std::atomic<uint64_t> json_errors{0};
std::atomic<uint64_t> text_requests{0};

error fail(const std::string& what) {
  json_errors.fetch_add(1, std::memory_order_relaxed);
  return make_error(ec::parse_error, "route request: " + what);
}

// Reads an optional unsigned field no larger than `max`; false on error.
bool read_uint(const nlohmann::json& obj, const char* field, uint64_t max,
               uint64_t& out, error& err) {
  auto it = obj.find(field);
  if (it == obj.end()) return true;
  if (!it->is_number_unsigned() || it->get<uint64_t>() > max) {
    err = fail(std::string("field '") + field +
               "' must be an integer from 0 to " + std::to_string(max) +
               ", got " + json_shown(*it));
    return false;
  }
  out = it->get<uint64_t>();
  return true;
}

}  // namespace

expected<route_request_msg> parse_route_json(std::string_view text,
                                             uint32_t block_tokens,
                                             uint64_t* id_out) {
  if (block_tokens == 0) return fail("block size must be at least 1 token");
  if (auto s = check_wire_limit(wire_limit::payload_bytes, text.size(),
                                "payload bytes");
      !s)
    return fail(s.err().message);
  // Deep nesting would recurse in the parser's tree and in error messages.
  if (!json_depth_within(text))
    return fail("nesting deeper than " + std::to_string(max_json_depth) +
                " levels");
  auto obj = nlohmann::json::parse(text.begin(), text.end(), nullptr, false);
  if (obj.is_discarded()) return fail("not valid JSON");
  if (!obj.is_object()) return fail("not a JSON object");
  route_request_msg r;
  error err;
  uint64_t id = 0, input = 0, output = 0;
  constexpr uint64_t u32 = std::numeric_limits<uint32_t>::max();
  if (!obj.contains("id")) return fail("field 'id' is missing");
  if (!read_uint(obj, "id", std::numeric_limits<uint64_t>::max(), id, err) ||
      !read_uint(obj, "input_tokens", u32, input, err) ||
      !read_uint(obj, "output_tokens", u32, output, err))
    return err;
  r.id = id;
  if (id_out) *id_out = id;
  r.output_tokens = static_cast<uint32_t>(output);
  for (auto [field, out] :
       {std::pair{"model", &r.model}, std::pair{"client_id", &r.client_id}}) {
    const auto f = obj.find(field);
    if (f == obj.end()) continue;
    if (!f->is_string())
      return fail(std::string("field '") + field + "' must be a string");
    *out = f->get<std::string>();
    if (out->size() > max_name_bytes)
      return fail(std::string("field '") + field + "' is longer than " +
                  std::to_string(max_name_bytes) + " bytes");
  }
  const auto tokens = obj.find("tokens");
  const auto blocks = obj.find("blocks");
  const auto prompt = obj.find("text");
  if ((tokens != obj.end()) + (blocks != obj.end()) + (prompt != obj.end()) !=
      1)
    return fail("exactly one of 'tokens', 'blocks' and 'text' is required");
  // Each form's block count is known before hashing: refused before work.
  const uint64_t bytes_per_block =
      uint64_t{block_tokens} * text_bytes_per_token;
  uint64_t count = 0;
  if (prompt != obj.end() && prompt->is_string())
    count = prompt->get_ref<const std::string&>().size() / bytes_per_block;
  else if (tokens != obj.end() && tokens->is_array())
    count = tokens->size() / block_tokens;
  else if (blocks != obj.end() && blocks->is_array())
    count = blocks->size();
  if (auto s = check_wire_limit(wire_limit::request_blocks, count, "blocks");
      !s)
    return fail(s.err().message);
  if (prompt != obj.end()) {
    if (!prompt->is_string()) return fail("field 'text' must be a string");
    const auto& s = prompt->get_ref<const std::string&>();
    if (s.empty()) return fail("field 'text' is empty");
    auto chain = hash_text_blocks(s, block_tokens);
    if (!chain) return fail("field 'text': " + chain.err().message);
    text_requests.fetch_add(1, std::memory_order_relaxed);
    r.blocks = std::move(*chain);
    const uint64_t est =
        (s.size() + text_bytes_per_token - 1) / text_bytes_per_token;
    r.input_tokens = static_cast<uint32_t>(input ? input : std::min(est, u32));
  } else if (tokens != obj.end()) {
    if (!tokens->is_array()) return fail("field 'tokens' must be an array");
    if (tokens->empty()) return fail("field 'tokens' is empty");
    std::vector<uint32_t> ids;
    ids.reserve(tokens->size());
    for (const auto& t : *tokens) {
      if (!t.is_number_unsigned() || t.get<uint64_t>() > u32)
        return fail("field 'tokens' holds a value that is not a token id: " +
                    json_shown(t));
      ids.push_back(t.get<uint32_t>());
    }
    std::string salt;
    if (auto s = obj.find("salt"); s != obj.end()) {
      if (!s->is_string()) return fail("field 'salt' must be a string");
      salt = s->get<std::string>();
    }
    auto hashes = hash_blocks(ids, block_tokens, salt);
    if (!hashes) return fail("field 'tokens': " + hashes.err().message);
    for (const auto& h : *hashes)
      r.blocks.push_back(h.seq);
    r.input_tokens = input ? static_cast<uint32_t>(input)
                           : static_cast<uint32_t>(ids.size());
  } else {
    if (!blocks->is_array()) return fail("field 'blocks' must be an array");
    if (blocks->empty() && input == 0)
      return fail(
          "field 'blocks' is empty: a prompt shorter than one block needs "
          "'input_tokens'");
    for (const auto& b : *blocks) {
      if (!b.is_number_unsigned())
        return fail("field 'blocks' holds a value that is not a hash: " +
                    json_shown(b));
      r.blocks.push_back(b.get<uint64_t>());
    }
    const uint64_t implied = uint64_t{block_tokens} * r.blocks.size();
    r.input_tokens =
        static_cast<uint32_t>(input ? input : std::min(implied, u32));
  }
  return r;
}

std::string decision_json(const decision& d) {
  if (!d.error.empty()) {
    nlohmann::ordered_json out{{"request", d.request},
                               {"error", d.error},
                               {"failure", to_string(d.failure)}};
    if (!d.client_id.empty()) out["client_id"] = d.client_id;
    return out.dump();
  }
  nlohmann::ordered_json prices = nlohmann::ordered_json::array();
  for (const auto& x : d.prices) {
    // A credit of zero computed as -c * 0 prints as -0.0: adding +0 makes
    // every zero positive and changes nothing else.
    price_breakdown p = x;
    for (double* v : {&p.read, &p.credit_gpu, &p.credit_host, &p.credit_disk,
                      &p.space, &p.overflow, &p.price, &p.delta})
      *v += 0.0;
    prices.push_back({{"worker", p.worker},
                      {"read", p.read},
                      {"credit_gpu", p.credit_gpu},
                      {"credit_host", p.credit_host},
                      {"credit_disk", p.credit_disk},
                      {"space", p.space},
                      {"speed", p.speed},
                      {"overflow", p.overflow},
                      {"price", p.price},
                      {"delta", p.delta}});
  }
  nlohmann::ordered_json out{{"request", d.request},
                             {"worker", d.worker},
                             {"endpoint", d.endpoint},
                             {"auctions", d.auctions},
                             {"prices", prices}};
  if (!d.client_id.empty()) out["client_id"] = d.client_id;
  return out.dump();
}

uint64_t json_decode_errors() {
  return json_errors.load(std::memory_order_relaxed);
}

uint64_t text_route_requests() {
  return text_requests.load(std::memory_order_relaxed);
}

const char* worker_state_name(const worker_status& w) {
  return w.gone        ? "gone"
         : w.draining  ? "draining"
         : w.unhealthy ? "unhealthy"
                       : "live";
}

nlohmann::ordered_json worker_load_json(const worker_status& w) {
  return {{"id", w.worker},
          {"state", worker_state_name(w)},
          {"gpu_blocks", w.gpu_blocks},
          {"host_blocks", w.host_blocks},
          {"disk_blocks", w.disk_blocks},
          {"queued_blocks", w.queued},
          {"active_blocks", w.active},
          {"capacity_blocks", w.capacity}};
}

}  // namespace kvmesh
