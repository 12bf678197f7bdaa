// Parsers and checks of the values kvmesh's commands take, as text.
// From a flag, a KVMESH_* variable or a config key: NATS server lists,
// subject prefixes, index shards, token lists and the prompt chains made of
// them. Pure functions, so that every front (the commands, the launchers,
// later a gateway) refuses the same values with the same words; errors name
// the flag the value stands for, as people give it there.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/error.hpp"

namespace kvmesh {

// Checks one --nats entry's form, [nats:// | tls://][user[:password]@]
// host[:port], so that a typo is a flag error naming the entry rather than
// libnats' "Invalid Argument" or "No server available". `entry` (from 1)
// and `text` (the whole list) name the entry in the error (parse_error).
status check_url(const std::string& url, size_t entry, const std::string& text);

// Splits --nats, a comma-separated list of one cluster's servers, into its
// URLs (blanks around each trimmed), each checked by check_url. Errors
// (parse_error) name the empty or malformed entry.
expected<std::vector<std::string>> split_urls(const std::string& text);

// The checked --nats list as libnats takes it: its URLs joined by commas,
// without blanks; "" when the list does not pass split_urls.
std::string url_list(const std::string& text);

// Checks a --prefix: subject tokens (letters, digits, '-', '_') separated by
// dots, so that every subject under it is valid. Errors (invalid_argument)
// name --prefix.
status check_prefix(const std::string& prefix);

// Parses --shard "I/N": shard I of N, 0 <= I < N. Digits only, so "+1/2"
// or "1/2x" fail (parse_error naming --shard).
expected<std::pair<uint32_t, uint32_t>> parse_shard(const std::string& text);

// Parses --tokens "1,2,3" into token ids; a malformed entry is named by
// position (parse_error), an empty list is empty_input.
expected<std::vector<uint32_t>> parse_token_list(const std::string& text);

// The prompt's chained block hashes (each block's sequence hash), as
// parse_route_json makes them from "tokens": hash_blocks, so that a JSON
// client and a command agree: empty when the tokens fill no full block.
// Errors (invalid_argument) name --tokens and --block-tokens.
expected<std::vector<uint64_t>> token_chain(const std::vector<uint32_t>& tokens,
                                            uint32_t block_tokens,
                                            const std::string& salt);

}  // namespace kvmesh
