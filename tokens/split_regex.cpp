// Split patterns of tokenizer.json: Oniguruma's syntax read and rewritten for
// PCRE2 where the meanings differ, refused where no exact rewrite is known.
//
// PCRE2 (Debian's libpcre2-8, JIT) rather than Oniguruma itself: it is the
// project's choice for regexes and its JIT is fast on the per-request path.
// Oniguruma 6.9.8 (what HF's onig crate builds) and PCRE2 10.42 both carry
// Unicode 14 tables, so \p{L} and \p{N} agree; the differences in syntax are
// handled below, construct by construct.
#define PCRE2_CODE_UNIT_WIDTH 8
#include "tokens/split_regex.hpp"

#include <pcre2.h>

#include <cstdio>
#include <vector>

namespace kvmesh {

namespace {

// Unicode White_Space, which is what Oniguruma's \s matches in UTF-8. PCRE2's
// \s under UCP is \p{Z}, \h and \v: the same set plus U+180E (Mongolian
// vowel separator, no longer a space since Unicode 6.3).
constexpr std::string_view kWhiteSpace =
    "\\t\\n\\x0B\\f\\r\\x20\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}"
    "\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}";

// General categories: the same names and, with the same Unicode version,
// the same sets in both engines.
bool is_general_category(std::string_view name) {
  static const char* const names[] = {
      "L",  "Lu", "Ll", "Lt", "Lm", "Lo", "M",  "Mn", "Mc", "Me", "N",
      "Nd", "Nl", "No", "P",  "Pc", "Pd", "Ps", "Pe", "Pi", "Pf", "Po",
      "S",  "Sm", "Sc", "Sk", "So", "Z",  "Zs", "Zl", "Zp"};
  for (const char* n : names)
    if (name == n) return true;
  return false;
}

bool is_hex(char c) {
  return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') ||
         (c >= 'A' && c <= 'F');
}
bool is_ascii_letter(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}
bool is_ascii_alnum(char c) {
  return is_ascii_letter(c) || (c >= '0' && c <= '9');
}

error refuse(std::string what) {
  return make_error(ec::invalid_argument, "tokenizer.json: Split regex " +
                                              what + " is not supported");
}

// Translates `p` into `out` or says which construct it refuses.
status translate(std::string_view p, std::string& out) {
  std::vector<bool> groups;  // per open group: case-insensitive?
  int ci = 0;                // open (?i: groups
  bool in_class = false;
  bool class_empty = false;
  std::string run;            // ASCII letters just written inside (?i:
  bool can_quantify = false;  // the last item may take a quantifier
  size_t i = 0;

  // One escape at p[i] == '\\'; appends its translation.
  auto escape = [&](bool inside) -> status {
    if (i + 1 >= p.size()) return refuse("trailing '\\'");
    const char c = p[i + 1];
    i += 2;
    switch (c) {
      case 's':
        if (inside)
          out.append(kWhiteSpace);
        else
          out.append("[").append(kWhiteSpace).append("]");
        return ok;
      case 'S':
        if (inside) return refuse("escape '\\S' inside a character class");
        out.append("[^").append(kWhiteSpace).append("]");
        return ok;
      case 'd':
        out.append("\\p{Nd}");
        return ok;
      case 'D':
        out.append("\\P{Nd}");
        return ok;
      case 'p':
      case 'P': {
        if (ci > 0) return refuse("property inside a (?i:) group");
        const size_t close = p.find('}', i);
        if (i >= p.size() || p[i] != '{' || close == std::string_view::npos)
          return refuse(std::string("escape '\\") + c + "' without {name}");
        const std::string_view name = p.substr(i + 1, close - i - 1);
        if (!is_general_category(name))
          return refuse("property '\\" + std::string(1, c) + "{" +
                        std::string(name) + "}'");
        out.append("\\").append(1, c).append("{").append(name).append("}");
        i = close + 1;
        return ok;
      }
      case 'r':
      case 'n':
      case 't':
      case 'f':
        out.append("\\").append(1, c);
        return ok;
      case 'v':  // Oniguruma: the vertical tab; PCRE2: vertical space
        out.append("\\x0B");
        return ok;
      case 'x':
      case 'u': {
        std::string hex;
        if (c == 'x' && i < p.size() && p[i] == '{') {
          const size_t close = p.find('}', i);
          if (close == std::string_view::npos) return refuse("escape '\\x{'");
          hex = std::string(p.substr(i + 1, close - i - 1));
          i = close + 1;
        } else {
          const size_t want = c == 'x' ? 2 : 4;
          while (hex.size() < want && i < p.size() && is_hex(p[i]))
            hex.push_back(p[i++]);
          if (hex.empty() || (c == 'u' && hex.size() != 4))
            return refuse(std::string("escape '\\") + c + "' without digits");
        }
        if (hex.empty() || hex.size() > 6) return refuse("escape '\\x{}'");
        for (char h : hex)
          if (!is_hex(h)) return refuse("escape '\\x{" + hex + "}'");
        const unsigned long v = std::stoul(hex, nullptr, 16);
        if (v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF))
          return refuse("code point '\\x{" + hex + "}'");
        if (ci > 0 && v >= 0x80)
          return refuse("non-ASCII character inside a (?i:) group");
        out.append("\\x{").append(hex).append("}");
        return ok;
      }
      default:
        // Escaped ASCII punctuation is the character itself in both.
        if (static_cast<unsigned char>(c) < 0x80 && !is_ascii_alnum(c) &&
            c > 0x20) {
          out.append("\\").append(1, c);
          return ok;
        }
        return refuse(std::string("escape '\\") + c + "'");
    }
  };

  while (i < p.size()) {
    const char c = p[i];
    if (in_class) {
      if (c == ']' && !class_empty) {
        out.push_back(']');
        ++i;
        in_class = false;
        can_quantify = true;
        continue;
      }
      class_empty = false;
      if (c == ']') return refuse("empty character class");
      if (c == '[') return refuse("nested class or POSIX bracket '['");
      if (c == '&' && i + 1 < p.size() && p[i + 1] == '&')
        return refuse("class intersection '&&'");
      if (c == '\\') {
        if (status s = escape(true); !s) return s;
        continue;
      }
      out.push_back(c);
      ++i;
      continue;
    }
    // A quantifier: * + ? {n} {n,} {n,m}, then an optional lazy '?'.
    if (c == '*' || c == '+' || c == '?' || c == '{') {
      if (!can_quantify) {
        if (c == '{') return refuse("'{' that is not a quantifier");
        return refuse(std::string("quantifier '") + c +
                      "' with nothing to repeat");
      }
      if (ci > 0) return refuse("quantifier inside a (?i:) group");
      if (c == '{') {
        size_t j = i + 1, digits = 0;
        while (j < p.size() && p[j] >= '0' && p[j] <= '9')
          ++j, ++digits;
        if (digits == 0) return refuse("'{' that is not a quantifier {n,m}");
        if (j < p.size() && p[j] == ',') {
          ++j;
          while (j < p.size() && p[j] >= '0' && p[j] <= '9')
            ++j;
        }
        if (j >= p.size() || p[j] != '}')
          return refuse("'{' that is not a quantifier {n,m}");
        out.append(p.substr(i, j + 1 - i));
        i = j + 1;
        // Oniguruma reads {n,m}? and {n,m}+ unlike PCRE2 (an optional or a
        // repeated repeat, not lazy or possessive).
        if (i < p.size() && (p[i] == '?' || p[i] == '+'))
          return refuse(std::string("'") + p[i] + "' after a {n,m} quantifier");
      } else {
        out.push_back(c);
        ++i;
        if (i < p.size() && p[i] == '?') {
          out.push_back('?');
          ++i;
        } else if (i < p.size() && p[i] == '+') {
          return refuse("possessive quantifier");
        }
      }
      if (i < p.size() &&
          (p[i] == '*' || p[i] == '+' || p[i] == '?' || p[i] == '{'))
        return refuse("stacked quantifiers");
      can_quantify = false;
      run.clear();
      continue;
    }
    can_quantify = true;
    switch (c) {
      case '\\':
        if (status s = escape(false); !s) return s;
        run.clear();
        continue;
      case '[':
        if (ci > 0) return refuse("character class inside a (?i:) group");
        out.push_back('[');
        ++i;
        if (i < p.size() && p[i] == '^') {
          out.push_back('^');
          ++i;
        }
        in_class = true;
        class_empty = true;
        run.clear();
        continue;
      case '(': {
        run.clear();
        can_quantify = false;
        if (i + 1 < p.size() && p[i + 1] == '?') {
          const std::string_view rest = p.substr(i);
          if (rest.substr(0, 3) == "(?:" || rest.substr(0, 3) == "(?=" ||
              rest.substr(0, 3) == "(?!") {
            out.append(rest.substr(0, 3));
            groups.push_back(false);
            i += 3;
          } else if (rest.substr(0, 4) == "(?i:") {
            out.append("(?i:");
            groups.push_back(true);
            ++ci;
            i += 4;
          } else {
            const size_t n = rest.size() < 4 ? rest.size() : 4;
            return refuse("group '" + std::string(rest.substr(0, n)) + "'");
          }
        } else {
          out.append("(?:");  // no captures are read
          groups.push_back(false);
          ++i;
        }
        continue;
      }
      case ')':
        if (groups.empty()) return refuse("unbalanced ')'");
        if (groups.back()) --ci;
        groups.pop_back();
        out.push_back(')');
        ++i;
        run.clear();
        continue;
      case '|':
        out.push_back('|');
        ++i;
        can_quantify = false;
        run.clear();
        continue;
      case '.':
        // Both: any character but \n (PCRE2's newline is set to LF).
        if (ci > 0) return refuse("'.' inside a (?i:) group");
        out.push_back('.');
        ++i;
        run.clear();
        continue;
      case '^':
      case '$':
        return refuse(std::string("anchor '") + c + "'");
      default:
        break;
    }
    // A literal character (one UTF-8 sequence).
    const unsigned char u = static_cast<unsigned char>(c);
    size_t len = u < 0x80 ? 1 : u >= 0xF0 ? 4 : u >= 0xE0 ? 3 : 2;
    if (i + len > p.size()) return refuse("truncated UTF-8 character");
    if (ci > 0) {
      if (u >= 0x80) return refuse("non-ASCII character inside a (?i:) group");
      if (is_ascii_letter(c)) {
        run.push_back(static_cast<char>(c | 0x20));
        // Oniguruma folds these letter pairs to one character (ß, ﬀ, ﬁ,
        // ﬂ, ﬅ, ﬆ) under (?i:); PCRE2 does not.
        const size_t n = run.size();
        if (n >= 2) {
          const std::string_view two(run.data() + n - 2, 2);
          if (two == "ss" || two == "st" || two == "ff" || two == "fi" ||
              two == "fl")
            return refuse("letters '" + std::string(two) +
                          "' inside a (?i:) group (a multi-character fold)");
        }
      } else {
        run.clear();
      }
    }
    if (c == ' ')
      out.append("\\x20");
    else if (c == '#')
      out.append("\\#");
    else
      out.append(p.substr(i, len));
    i += len;
  }
  if (in_class) return refuse("unterminated character class");
  if (!groups.empty()) return refuse("unterminated group");
  return ok;
}

// Per thread: PCRE2's match data and JIT stack (neither may be shared by
// two matches at once).
struct scratch {
  pcre2_match_data* data = nullptr;
  pcre2_match_context* context = nullptr;
  pcre2_jit_stack* stack = nullptr;
  scratch() {
    data = pcre2_match_data_create(1, nullptr);
    context = pcre2_match_context_create(nullptr);
    stack = pcre2_jit_stack_create(32 * 1024, 16 * 1024 * 1024, nullptr);
    if (context && stack) pcre2_jit_stack_assign(context, nullptr, stack);
    // PCRE2's default of 10 million steps fails one match over a 10 MB run
    // of spaces (\s*[\r\n]+ backtracks through it once): the patterns are
    // linear in their input, so the limit only needs to stay out of the way.
    // (Oniguruma, in HF, gives up on such a run from about 16 MB.)
    if (context) pcre2_set_match_limit(context, ~uint32_t{0});
  }
  ~scratch() {
    pcre2_jit_stack_free(stack);
    pcre2_match_context_free(context);
    pcre2_match_data_free(data);
  }
  scratch(const scratch&) = delete;
  scratch& operator=(const scratch&) = delete;
};

scratch& thread_scratch() {
  thread_local scratch s;
  return s;
}

std::string pcre2_message(int code) {
  PCRE2_UCHAR buf[256];
  if (pcre2_get_error_message(code, buf, sizeof buf) < 0)
    return "PCRE2 error " + std::to_string(code);
  return reinterpret_cast<const char*>(buf);
}

}  // namespace

struct split_regex::impl {
  std::string pattern;
  pcre2_code* code = nullptr;
  bool jit = false;
  ~impl() { pcre2_code_free(code); }
};

expected<split_regex> split_regex::compile(std::string_view oniguruma_pattern) {
  auto im = std::make_shared<impl>();
  if (status s = translate(oniguruma_pattern, im->pattern); !s) return s.err();
  pcre2_compile_context* cc = pcre2_compile_context_create(nullptr);
  if (!cc) return make_error(ec::capacity_exceeded, "PCRE2: out of memory");
  pcre2_set_newline(cc, PCRE2_NEWLINE_LF);
  int err = 0;
  PCRE2_SIZE off = 0;
  im->code = pcre2_compile(
      reinterpret_cast<PCRE2_SPTR>(im->pattern.data()), im->pattern.size(),
      PCRE2_UTF | PCRE2_UCP | PCRE2_NEVER_BACKSLASH_C, &err, &off, cc);
  pcre2_compile_context_free(cc);
  if (!im->code)
    return make_error(ec::invalid_argument,
                      "tokenizer.json: Split regex does not compile (as " +
                          im->pattern + "): " + pcre2_message(err) +
                          " at offset " + std::to_string(off));
  uint32_t min_length = 0;
  pcre2_pattern_info(im->code, PCRE2_INFO_MINLENGTH, &min_length);
  if (min_length == 0) return refuse("that may match the empty string");
  im->jit = pcre2_jit_compile(im->code, PCRE2_JIT_COMPLETE) == 0;
  split_regex r;
  r.impl_ = std::move(im);
  return r;
}

const std::string& split_regex::pcre2_pattern() const {
  return impl_->pattern;
}

expected<bool> split_regex::find(std::string_view subject, size_t start,
                                 size_t* begin, size_t* end) const {
  scratch& s = thread_scratch();
  if (!s.data || !s.context || !s.stack)
    return make_error(ec::capacity_exceeded, "PCRE2: out of memory");
  const auto* text = reinterpret_cast<PCRE2_SPTR>(subject.data());
  const int rc = impl_->jit
                     ? pcre2_jit_match(impl_->code, text, subject.size(), start,
                                       0, s.data, s.context)
                     : pcre2_match(impl_->code, text, subject.size(), start,
                                   PCRE2_NO_UTF_CHECK, s.data, s.context);
  if (rc == PCRE2_ERROR_NOMATCH) return false;
  if (rc < 0)
    return make_error(
        ec::capacity_exceeded,
        "tokenizer: Split regex match failed: " + pcre2_message(rc));
  const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(s.data);
  *begin = ov[0];
  *end = ov[1];
  return true;
}

std::string split_regex::unicode_version() {
  char buf[64] = {0};
  if (pcre2_config(PCRE2_CONFIG_UNICODE_VERSION, buf) < 0) return "unknown";
  return buf;
}

}  // namespace kvmesh
