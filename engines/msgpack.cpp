// The bounded MessagePack reader: big-endian lengths checked against the
// bytes left before anything is allocated.
#include "engines/msgpack.hpp"

#include <cstring>

namespace kvmesh::msgpack {

const char* to_string(type t) {
  switch (t) {
    case type::nil:
      return "nil";
    case type::boolean:
      return "bool";
    case type::uint:
      return "unsigned integer";
    case type::sint:
      return "negative integer";
    case type::f64:
      return "float";
    case type::str:
      return "string";
    case type::bin:
      return "bytes";
    case type::array:
      return "array";
    case type::map:
      return "map";
    case type::ext:
      return "extension";
  }
  return "unknown";
}

const value* value::find(std::string_view name) const {
  if (kind != type::map) return nullptr;
  for (size_t k = 0; k + 1 < items.size(); k += 2)
    if (items[k].kind == type::str && items[k].raw == name)
      return &items[k + 1];
  return nullptr;
}

namespace {

class reader {
 public:
  reader(const uint8_t* data, size_t size, const limits& lim)
      : p_(data), begin_(data), end_(data + size), lim_(lim) {}

  bool read(value& out, uint32_t depth) {
    if (depth > lim_.max_depth)
      return fail("nesting deeper than " + std::to_string(lim_.max_depth));
    if (++values_ > lim_.max_values) return fail("too many values");
    uint8_t b = 0;
    if (!byte(b)) return false;
    if (b <= 0x7f) return uint_value(out, b);
    if (b >= 0xe0) return int_value(out, static_cast<int8_t>(b));
    if (b >= 0x80 && b <= 0x8f)
      return container(out, type::map, b & 0x0f, depth);
    if (b >= 0x90 && b <= 0x9f)
      return container(out, type::array, b & 0x0f, depth);
    if (b >= 0xa0 && b <= 0xbf) return blob(out, type::str, b & 0x1f);
    uint64_t n = 0;
    switch (b) {
      case 0xc0:
        out.kind = type::nil;
        return true;
      case 0xc2:
      case 0xc3:
        out.kind = type::boolean;
        out.b = b == 0xc3;
        return true;
      case 0xc4:
      case 0xc5:
      case 0xc6:
        return big(n, 1u << (b - 0xc4)) && blob(out, type::bin, n);
      case 0xc7:
      case 0xc8:
      case 0xc9:
        // The extension's type byte follows its length.
        return big(n, 1u << (b - 0xc7)) && skip(1) && blob(out, type::ext, n);
      case 0xca: {
        uint64_t bits = 0;
        if (!big(bits, 4)) return false;
        float f;
        const uint32_t b32 = static_cast<uint32_t>(bits);
        std::memcpy(&f, &b32, 4);
        out.kind = type::f64;
        out.f = f;
        return true;
      }
      case 0xcb: {
        uint64_t bits = 0;
        if (!big(bits, 8)) return false;
        std::memcpy(&out.f, &bits, 8);
        out.kind = type::f64;
        return true;
      }
      case 0xcc:
      case 0xcd:
      case 0xce:
      case 0xcf:
        return big(n, 1u << (b - 0xcc)) && uint_value(out, n);
      case 0xd0:
      case 0xd1:
      case 0xd2:
      case 0xd3: {
        const unsigned width = 1u << (b - 0xd0);
        if (!big(n, width)) return false;
        // Sign-extend from the encoded width.
        const unsigned shift = 64 - 8 * width;
        const int64_t v = static_cast<int64_t>(n << shift) >> shift;
        return int_value(out, v);
      }
      case 0xd4:
      case 0xd5:
      case 0xd6:
      case 0xd7:
      case 0xd8:
        return skip(1) && blob(out, type::ext, uint64_t{1} << (b - 0xd4));
      case 0xd9:
      case 0xda:
      case 0xdb:
        return big(n, 1u << (b - 0xd9)) && blob(out, type::str, n);
      case 0xdc:
      case 0xdd:
        return big(n, b == 0xdc ? 2 : 4) &&
               container(out, type::array, n, depth);
      case 0xde:
      case 0xdf:
        return big(n, b == 0xde ? 2 : 4) && container(out, type::map, n, depth);
      default:  // 0xc1 is never used
        return fail("unknown type byte 0x" + hex(b));
    }
  }

  bool at_end() const { return p_ == end_; }
  size_t offset() const { return static_cast<size_t>(p_ - begin_); }
  error& err() { return err_; }
  bool fail(const std::string& why) {
    if (err_.code == ec::none)
      err_ = make_error(ec::parse_error, "msgpack: " + why + " at byte " +
                                             std::to_string(offset()));
    return false;
  }

 private:
  static std::string hex(uint8_t b) {
    const char* d = "0123456789abcdef";
    return {d[b >> 4], d[b & 15]};
  }
  size_t left() const { return static_cast<size_t>(end_ - p_); }
  bool byte(uint8_t& b) {
    if (p_ == end_) return fail("truncated");
    b = *p_++;
    return true;
  }
  bool skip(size_t n) {
    if (left() < n) return fail("truncated");
    p_ += n;
    return true;
  }
  bool big(uint64_t& out, unsigned width) {
    if (left() < width) return fail("truncated");
    out = 0;
    for (unsigned i = 0; i < width; ++i)
      out = (out << 8) | *p_++;
    return true;
  }
  bool blob(value& out, type t, uint64_t n) {
    if (left() < n) return fail("truncated");
    out.kind = t;
    out.raw = std::string_view(reinterpret_cast<const char*>(p_), n);
    p_ += n;
    return true;
  }
  static bool uint_value(value& out, uint64_t v) {
    out.kind = type::uint;
    out.u = v;
    return true;
  }
  static bool int_value(value& out, int64_t v) {
    // msgpack has two encodings of a non-negative number; one kind here.
    if (v >= 0) return uint_value(out, static_cast<uint64_t>(v));
    out.kind = type::sint;
    out.i = v;
    return true;
  }
  bool container(value& out, type t, uint64_t n, uint32_t depth) {
    const uint64_t count = t == type::map ? 2 * n : n;
    // Each element takes a byte at least: a count beyond what is left is
    // a lie, refused before it can allocate.
    if (count > left()) return fail("truncated");
    // Refused before the allocation, which would come first otherwise.
    if (values_ + count > lim_.max_values) return fail("too many values");
    out.kind = t;
    out.items.resize(count);
    for (auto& item : out.items)
      if (!read(item, depth + 1)) return false;
    return true;
  }

  const uint8_t* p_;
  const uint8_t* begin_;
  const uint8_t* end_;
  limits lim_;
  size_t values_ = 0;
  error err_;
};

}  // namespace

expected<value> parse(const uint8_t* data, size_t size, const limits& lim) {
  if (size == 0) return make_error(ec::parse_error, "msgpack: empty input");
  reader r(data, size, lim);
  value v;
  if (!r.read(v, 0)) return r.err();
  if (!r.at_end()) {
    r.fail(std::to_string(size - r.offset()) + " trailing bytes");
    return r.err();
  }
  return v;
}

}  // namespace kvmesh::msgpack
