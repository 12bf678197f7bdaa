// Request traces in the Mooncake JSONL format: one request per line with
// arrival time, token counts and the prompt's block ids.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/error.hpp"

namespace kvmesh {

struct trace_request {
  double arrival_ms = 0;
  uint32_t input_tokens = 0;
  uint32_t output_tokens = 0;
  // Prefix-position ids: equal ids at equal positions mean an equal prefix,
  // so each id serves as the chained hash of the prefix ending there.
  std::vector<uint64_t> blocks;
};

// Parses one line. Errors name `where` (file:line) and the bad field.
expected<trace_request> parse_trace_line(std::string_view line,
                                         const std::string& where);

// Reads a whole trace; blank lines are skipped. Errors: missing or
// unreadable file (io_error), no requests (empty_input), the first malformed
// line (parse_error), arrivals going back in time (parse_error).
expected<std::vector<trace_request>> load_trace(const std::string& path);

}  // namespace kvmesh
