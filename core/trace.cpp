// Mooncake trace parsing with errors that name file, line and field.
#include "core/trace.hpp"

#include <fstream>
#include <limits>

#include <nlohmann/json.hpp>

#include "core/json_guard.hpp"

namespace kvmesh {

namespace {

error field_error(const std::string& where, const char* field,
                  const std::string& what) {
  return make_error(ec::parse_error, where + ": field '" + field + "' " + what);
}

// Reads a non-negative integer field no larger than `max`.
bool read_uint(const nlohmann::json& obj, const char* field, uint64_t max,
               const std::string& where, uint64_t& out, error& err) {
  auto it = obj.find(field);
  if (it == obj.end()) {
    err = field_error(where, field, "is missing");
    return false;
  }
  if (!it->is_number_integer() || (it->is_number_integer() && *it < 0)) {
    err = field_error(where, field,
                      "must be a non-negative integer, got " + json_shown(*it));
    return false;
  }
  const uint64_t v = it->get<uint64_t>();
  if (v > max) {
    err = field_error(where, field, "is too large: " + json_shown(*it));
    return false;
  }
  out = v;
  return true;
}

}  // namespace

expected<trace_request> parse_trace_line(std::string_view line,
                                         const std::string& where) {
  // Deep nesting would recurse in the parser's tree and in error messages.
  if (!json_depth_within(line))
    return make_error(ec::parse_error, where + ": nesting deeper than " +
                                           std::to_string(max_json_depth) +
                                           " levels");
  auto obj = nlohmann::json::parse(line.begin(), line.end(), nullptr, false);
  if (obj.is_discarded())
    return make_error(ec::parse_error, where + ": not valid JSON");
  if (!obj.is_object())
    return make_error(ec::parse_error, where + ": not a JSON object");
  trace_request r;
  error err;
  uint64_t ts = 0, in = 0, out = 0;
  constexpr uint64_t max_tokens = std::numeric_limits<uint32_t>::max();
  if (!read_uint(obj, "timestamp", uint64_t{1} << 52, where, ts, err) ||
      !read_uint(obj, "input_length", max_tokens, where, in, err) ||
      !read_uint(obj, "output_length", max_tokens, where, out, err))
    return err;
  if (in == 0) return field_error(where, "input_length", "must be at least 1");
  r.arrival_ms = static_cast<double>(ts);
  r.input_tokens = static_cast<uint32_t>(in);
  r.output_tokens = static_cast<uint32_t>(out);
  auto it = obj.find("hash_ids");
  if (it == obj.end()) return field_error(where, "hash_ids", "is missing");
  if (!it->is_array())
    return field_error(where, "hash_ids", "must be an array of integers");
  if (it->empty()) return field_error(where, "hash_ids", "is empty");
  r.blocks.reserve(it->size());
  for (const auto& id : *it) {
    if (!id.is_number_integer() || id < 0)
      return field_error(
          where, "hash_ids",
          "holds a non-integer or negative id: " + json_shown(id));
    r.blocks.push_back(id.get<uint64_t>());
  }
  return r;
}

expected<std::vector<trace_request>> load_trace(const std::string& path) {
  std::ifstream in(path);
  if (!in) return make_error(ec::io_error, path + ": cannot open trace file");
  std::vector<trace_request> out;
  std::string line;
  size_t number = 0;
  while (std::getline(in, line)) {
    ++number;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    auto r = parse_trace_line(line, path + ":" + std::to_string(number));
    if (!r) return r.err();
    if (!out.empty() && r->arrival_ms < out.back().arrival_ms)
      return make_error(ec::parse_error,
                        path + ":" + std::to_string(number) +
                            ": field 'timestamp' goes back in time");
    out.push_back(std::move(*r));
  }
  if (in.bad()) return make_error(ec::io_error, path + ": read error");
  if (out.empty())
    return make_error(ec::empty_input, path + ": trace has no requests");
  return out;
}

}  // namespace kvmesh
