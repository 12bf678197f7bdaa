// A tokenizer.json Split pattern (written for Oniguruma, which HF tokenizers
// compiles it with) run by PCRE2 with the same meaning, or refused.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>

#include "core/error.hpp"

namespace kvmesh {

// HF tokenizers compiles a Split pattern with Oniguruma (the `onig` crate);
// PCRE2 (JIT, UTF, UCP) runs it here. The two agree on most syntax but not
// all, so the pattern is read once, construct by construct: what means the
// same in both is passed on, what differs in a way with a known exact
// rewrite is rewritten (\s and \S: Oniguruma's are Unicode White_Space,
// PCRE2's also take U+180E; \v: a vertical tab in Oniguruma, a class in
// PCRE2; \d; \uHHHH), and everything else is refused by name, so that a
// pattern never runs with a meaning it does not have in HF.
class split_regex {
 public:
  // Translates and compiles `oniguruma_pattern`. Errors name the construct.
  static expected<split_regex> compile(std::string_view oniguruma_pattern);

  // The PCRE2 pattern actually compiled (for messages and tests).
  const std::string& pcre2_pattern() const;

  // The first match in `subject` at or after `start`, as [*begin, *end).
  // `subject` must be valid UTF-8 (the caller checks once) and `start` at a
  // character boundary. False when nothing matches; an error when PCRE2
  // fails (a resource limit), never a wrong split.
  expected<bool> find(std::string_view subject, size_t start, size_t* begin,
                      size_t* end) const;

  // The Unicode version of PCRE2's character tables (for describe()).
  static std::string unicode_version();

  struct impl;

 private:
  std::shared_ptr<const impl> impl_;
};

}  // namespace kvmesh
