// Fuzzes the bounded MessagePack reader that takes engines' KV event
// payloads off ZMQ: a parsed value re-encodes to bytes that parse to the
// same tree.
#include <cstdint>
#include <cstring>
#include <string>

#include "engines/msgpack.hpp"
#include "tests/fuzz/check.hpp"

namespace kvmesh::msgpack {
namespace {

void put_big(std::string& out, uint64_t v, unsigned width) {
  for (unsigned i = width; i-- > 0;)
    out += static_cast<char>((v >> (8 * i)) & 0xff);
}

// The widest encoding of each kind: simple, and a different byte layout
// from most inputs, so that the reparse checks the reader's widths too.
void write(const value& v, std::string& out) {
  switch (v.kind) {
    case type::nil:
      out += '\xc0';
      break;
    case type::boolean:
      out += v.b ? '\xc3' : '\xc2';
      break;
    case type::uint:
      out += '\xcf';
      put_big(out, v.u, 8);
      break;
    case type::sint:
      out += '\xd3';
      put_big(out, static_cast<uint64_t>(v.i), 8);
      break;
    case type::f64: {
      uint64_t bits;
      std::memcpy(&bits, &v.f, 8);
      out += '\xcb';
      put_big(out, bits, 8);
      break;
    }
    case type::str:
    case type::bin:
      out += v.kind == type::str ? '\xdb' : '\xc6';
      put_big(out, v.raw.size(), 4);
      out += v.raw;
      break;
    case type::ext:
      out += '\xc9';
      put_big(out, v.raw.size(), 4);
      out += '\x01';  // the type byte, which the reader skips
      out += v.raw;
      break;
    case type::array:
    case type::map:
      out += v.kind == type::array ? '\xdd' : '\xdf';
      put_big(out, v.size(), 4);
      for (const auto& i : v.items)
        write(i, out);
      break;
  }
}

bool same(const value& a, const value& b) {
  if (a.kind != b.kind || a.items.size() != b.items.size()) return false;
  switch (a.kind) {
    case type::boolean:
      if (a.b != b.b) return false;
      break;
    case type::uint:
      if (a.u != b.u) return false;
      break;
    case type::sint:
      if (a.i != b.i) return false;
      break;
    case type::f64:
      if (std::memcmp(&a.f, &b.f, 8) != 0) return false;
      break;
    case type::str:
    case type::bin:
    case type::ext:
      if (a.raw != b.raw) return false;
      break;
    default:
      break;
  }
  for (size_t i = 0; i < a.items.size(); ++i)
    if (!same(a.items[i], b.items[i])) return false;
  return true;
}

size_t depth_of(const value& v) {
  size_t d = 0;
  for (const auto& i : v.items)
    d = std::max(d, depth_of(i) + 1);
  return d;
}

}  // namespace
}  // namespace kvmesh::msgpack

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace kvmesh::msgpack;
  const limits lim;
  auto v = parse(data, size, lim);
  if (!v) {
    FUZZ_CHECK(v.err().message.rfind("msgpack: ", 0) == 0,
               "the error says what was read");
    return 0;
  }
  FUZZ_CHECK(depth_of(*v) <= lim.max_depth, "nesting stays within the limit");
  std::string again;
  write(*v, again);
  auto w =
      parse(reinterpret_cast<const uint8_t*>(again.data()), again.size(), lim);
  FUZZ_CHECK(static_cast<bool>(w), "a re-encoded value parses");
  FUZZ_CHECK(same(*v, *w), "the round trip keeps the value");
  return 0;
}
