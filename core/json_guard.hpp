// Guards for JSON taken from the wire: a nesting check before parsing and
// a bounded rendering of a value for error messages.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace kvmesh {

// No request kvmesh reads nests deeper than a few levels (an OpenAI body
// with tool schemas perhaps a dozen); the limit is far above that and far
// below what would exhaust a stack or blow a small payload up into a
// large tree (each level costs about 100 bytes of parsed tree per byte).
inline constexpr size_t max_json_depth = 64;

// Whether `text` nests arrays and objects at most `max` deep, counted
// outside strings. Malformed text passes: the parser refuses it.
inline bool json_depth_within(std::string_view text,
                              size_t max = max_json_depth) {
  size_t depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\')
        ++i;
      else if (c == '"')
        in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > max) return false;
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
  return true;
}

// A value as an error message shows it: scalars as JSON, cut at 64
// characters; arrays and objects by their type alone (rendering them
// recurses as deep as they nest, and they may be large).
inline std::string json_shown(const nlohmann::json& v) {
  if (v.is_structured()) return std::string("an ") + v.type_name();
  std::string s = v.dump();
  if (s.size() <= 64) return s;
  // Cut at a character's start: the message may travel as JSON, whose
  // writer refuses a broken UTF-8 sequence.
  size_t n = 61;
  while (n > 0 && (static_cast<unsigned char>(s[n]) & 0xc0) == 0x80)
    --n;
  return s.substr(0, n) + "...";
}

}  // namespace kvmesh
