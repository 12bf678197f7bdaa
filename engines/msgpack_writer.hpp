// A MessagePack writer: the bytes an engine publishes as KV events, field
// by field, with the smallest encodings msgspec uses. Hand-written: Debian's
// msgpack-cxx needs Boost 1.74, which conflicts with the gateway's 1.81,
// and the simulated engine needs only these few encodings.
#pragma once

#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

namespace kvmesh {

class mp_writer {
 public:
  mp_writer& nil() { return put(0xc0); }
  mp_writer& boolean(bool b) { return put(b ? 0xc3 : 0xc2); }
  mp_writer& uint(uint64_t v) {
    if (v <= 0x7f) return put(static_cast<uint8_t>(v));
    if (v <= 0xff) return put(0xcc).big(v, 1);
    if (v <= 0xffff) return put(0xcd).big(v, 2);
    if (v <= 0xffffffffull) return put(0xce).big(v, 4);
    return put(0xcf).big(v, 8);
  }
  mp_writer& sint(int64_t v) {
    if (v >= 0) return uint(static_cast<uint64_t>(v));
    if (v >= -32) return put(static_cast<uint8_t>(v));
    if (v >= -128) return put(0xd0).big(static_cast<uint64_t>(v), 1);
    if (v >= -32768) return put(0xd1).big(static_cast<uint64_t>(v), 2);
    if (v >= -2147483648ll) return put(0xd2).big(static_cast<uint64_t>(v), 4);
    return put(0xd3).big(static_cast<uint64_t>(v), 8);
  }
  mp_writer& f64(double d) {
    uint64_t bits;
    std::memcpy(&bits, &d, 8);
    return put(0xcb).big(bits, 8);
  }
  mp_writer& str(std::string_view s) {
    if (s.size() <= 31)
      put(static_cast<uint8_t>(0xa0 | s.size()));
    else if (s.size() <= 0xff)
      put(0xd9).big(s.size(), 1);
    else if (s.size() <= 0xffff)
      put(0xda).big(s.size(), 2);
    else
      put(0xdb).big(s.size(), 4);
    return raw(s);
  }
  mp_writer& bin(std::string_view s) {
    if (s.size() <= 0xff)
      put(0xc4).big(s.size(), 1);
    else if (s.size() <= 0xffff)
      put(0xc5).big(s.size(), 2);
    else
      put(0xc6).big(s.size(), 4);
    return raw(s);
  }
  mp_writer& array(size_t n) {
    if (n <= 15) return put(static_cast<uint8_t>(0x90 | n));
    if (n <= 0xffff) return put(0xdc).big(n, 2);
    return put(0xdd).big(n, 4);
  }
  mp_writer& map(size_t n) {
    if (n <= 15) return put(static_cast<uint8_t>(0x80 | n));
    if (n <= 0xffff) return put(0xde).big(n, 2);
    return put(0xdf).big(n, 4);
  }
  mp_writer& uints(std::initializer_list<uint64_t> vs) {
    array(vs.size());
    for (uint64_t v : vs)
      uint(v);
    return *this;
  }
  mp_writer& uints(const std::vector<uint32_t>& vs) {
    array(vs.size());
    for (uint64_t v : vs)
      uint(v);
    return *this;
  }
  mp_writer& raw(std::string_view s) {
    out_.insert(out_.end(), s.begin(), s.end());
    return *this;
  }

  const std::vector<uint8_t>& bytes() const { return out_; }
  std::string text() const { return std::string(out_.begin(), out_.end()); }

 private:
  mp_writer& put(uint8_t b) {
    out_.push_back(b);
    return *this;
  }
  mp_writer& big(uint64_t v, unsigned width) {
    for (unsigned i = width; i-- > 0;)
      out_.push_back(static_cast<uint8_t>(v >> (8 * i)));
    return *this;
  }

  std::vector<uint8_t> out_;
};

// The 8-byte big-endian sequence frame.
inline std::string seq_frame(uint64_t seq) {
  std::string s(8, '\0');
  for (int i = 7; i >= 0; --i) {
    s[i] = static_cast<char>(seq & 0xff);
    seq >>= 8;
  }
  return s;
}

}  // namespace kvmesh
