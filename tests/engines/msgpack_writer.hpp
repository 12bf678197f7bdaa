// Test helpers over engines/msgpack_writer.hpp: the writer, the sequence
// frame, and bytes from hex.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "engines/msgpack_writer.hpp"

namespace kvmesh::test {

using kvmesh::mp_writer;
using kvmesh::seq_frame;

// Bytes from a hex string ("92cb3f...").
inline std::vector<uint8_t> from_hex(std::string_view hex) {
  std::vector<uint8_t> out;
  auto nib = [](char c) { return c <= '9' ? c - '0' : (c | 0x20) - 'a' + 10; };
  for (size_t i = 0; i + 1 < hex.size(); i += 2)
    out.push_back(static_cast<uint8_t>(nib(hex[i]) << 4 | nib(hex[i + 1])));
  return out;
}

}  // namespace kvmesh::test
