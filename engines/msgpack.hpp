// A bounded MessagePack reader for untrusted bytes: a small tree of views
// into the input, no exceptions, limits on depth and size.
// Hand-written rather than Debian's msgpack-c (libmsgpack-cxx-dev), whose
// unpacker throws and builds its objects in a zone of its own: KV events
// from an engine are read as views, every length checked against the
// bytes left.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/error.hpp"

namespace kvmesh::msgpack {

enum class type : uint8_t {
  nil,
  boolean,
  uint,   // a non-negative integer (any width)
  sint,   // a negative integer
  f64,    // float 32 or 64, widened
  str,    // UTF-8 text (not checked)
  bin,    // raw bytes
  array,  // items are the elements
  map,    // items are key, value, key, value, ...
  ext,    // an extension (raw holds its data; never used by the engines)
};

const char* to_string(type t);

// One decoded value. Strings, byte strings and extensions are views into
// the input, which must outlive the tree.
struct value {
  type kind = type::nil;
  bool b = false;
  uint64_t u = 0;            // uint
  int64_t i = 0;             // sint
  double f = 0;              // f64
  std::string_view raw;      // str, bin, ext
  std::vector<value> items;  // array, map

  bool is(type t) const { return kind == t; }
  bool is_int() const { return kind == type::uint || kind == type::sint; }
  size_t size() const {
    return kind == type::map ? items.size() / 2 : items.size();
  }
  // The value of key `name` in a map whose keys are strings; nullptr when
  // absent or when this is not a map.
  const value* find(std::string_view name) const;
};

struct limits {
  // Nesting deeper than this is refused: a hostile frame of nested arrays
  // would otherwise recurse without bound.
  uint32_t max_depth = 32;
  // Every element takes at least one byte of input, so the input's size
  // bounds the element count; this bounds the tree's memory further (about
  // 80 bytes a value). A step of a large engine stores some 10^5 tokens.
  size_t max_values = size_t{1} << 22;
};

// Parses exactly one value spanning all of [data, data + size). Errors are
// ec::parse_error naming the offset and what is wrong (truncated, an
// unknown type byte, too deep, trailing bytes).
expected<value> parse(const uint8_t* data, size_t size, const limits& lim = {});

}  // namespace kvmesh::msgpack
