// Chat templates: a hand-written Jinja2 renderer for models' chat templates
// (Debian has no C++ Jinja library), with Python's and transformers'
// semantics. Lexer, parser to an AST, evaluator; anything it does not
// implement fails at parse with its name and line.
#include "tokens/chat_template.hpp"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <functional>
#include <limits>
#include <set>
#include <stdexcept>
#include <utility>
#include <vector>

namespace kvmesh {
namespace {

using ojson = nlohmann::ordered_json;

// Internal failures; render() and parse() turn them into error values.
// What Python's Jinja would raise too, a construct this renderer leaves out
// that only the values reveal (Python would render it), or one of the
// render's bounds.
enum class failure { python, gap, bound };
struct template_error : std::runtime_error {
  template_error(const std::string& what, failure k)
      : std::runtime_error(what), kind(k) {}
  explicit template_error(const std::string& what)
      : template_error(what, failure::python) {}
  failure kind;
};

std::string at_line(int line, const std::string& what) {
  return "chat template line " + std::to_string(line) + ": " + what;
}
[[noreturn]] void fail_at(int line, const std::string& what) {
  throw template_error(at_line(line, what));
}
[[noreturn]] void gap_at(int line, const std::string& what) {
  throw template_error(at_line(line, what), failure::gap);
}
[[noreturn]] void bound_at(int line, const std::string& what) {
  throw template_error(at_line(line, what), failure::bound);
}

// ---------------------------------------------------------------- UTF-8

// Decodes one code point at s[i] (lenient: a stray byte is itself).
uint32_t next_cp(std::string_view s, size_t& i) {
  auto c = static_cast<unsigned char>(s[i]);
  int n = c < 0x80         ? 0
          : (c >> 5) == 6  ? 1
          : (c >> 4) == 14 ? 2
          : (c >> 3) == 30 ? 3
                           : -1;
  if (n <= 0 || i + n >= s.size()) {
    ++i;
    return c;
  }
  uint32_t cp = c & (0x3f >> n);
  for (int k = 1; k <= n; ++k) {
    auto d = static_cast<unsigned char>(s[i + k]);
    if ((d >> 6) != 2) {
      ++i;
      return c;
    }
    cp = (cp << 6) | (d & 0x3f);
  }
  i += n + 1;
  return cp;
}

void put_cp(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xc0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3f));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xe0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
    out += static_cast<char>(0x80 | (cp & 0x3f));
  } else {
    out += static_cast<char>(0xf0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3f));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
    out += static_cast<char>(0x80 | (cp & 0x3f));
  }
}

std::vector<std::string_view> code_points(std::string_view s) {
  std::vector<std::string_view> out;
  for (size_t i = 0; i < s.size();) {
    size_t start = i;
    next_cp(s, i);
    out.push_back(s.substr(start, i - start));
  }
  return out;
}

size_t cp_count(std::string_view s) {
  size_t n = 0;
  for (size_t i = 0; i < s.size();)
    next_cp(s, i), ++n;
  return n;
}

// Python's str.isspace().
bool py_space(uint32_t c) {
  return (c >= 9 && c <= 13) || (c >= 0x1c && c <= 0x20) || c == 0x85 ||
         c == 0xa0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200a) ||
         c == 0x2028 || c == 0x2029 || c == 0x202f || c == 0x205f ||
         c == 0x3000;
}

// Python's str.splitlines() boundaries.
bool py_linebreak(uint32_t c) {
  return c == '\n' || c == '\r' || c == 0x0b || c == 0x0c ||
         (c >= 0x1c && c <= 0x1e) || c == 0x85 || c == 0x2028 || c == 0x2029;
}

// Python's str.isprintable() outside ASCII, as far as this renderer knows
// it: controls, format characters, separators, surrogates and private use.
bool py_printable(uint32_t c) {
  if (c < 0x20 || c == 0x7f) return false;
  if (c < 0x7f) return true;
  static const uint32_t ranges[][2] = {
      {0x80, 0xa0},       {0xad, 0xad},       {0x600, 0x605},
      {0x61c, 0x61c},     {0x6dd, 0x6dd},     {0x70f, 0x70f},
      {0x890, 0x891},     {0x8e2, 0x8e2},     {0x180e, 0x180e},
      {0x1680, 0x1680},   {0x2000, 0x200f},   {0x2028, 0x202f},
      {0x205f, 0x2064},   {0x2066, 0x206f},   {0x3000, 0x3000},
      {0xd800, 0xf8ff},   {0xfeff, 0xfeff},   {0xfff0, 0xfffb},
      {0xfffe, 0xffff},   {0x110bd, 0x110bd}, {0x110cd, 0x110cd},
      {0x13430, 0x1343f}, {0x1bca0, 0x1bca3}, {0x1d173, 0x1d17a},
      {0xe0001, 0xe0001}, {0xe0020, 0xe007f}, {0xf0000, 0x10ffff}};
  for (auto& r : ranges)
    if (c >= r[0] && c <= r[1]) return false;
  return true;
}

bool is_ascii(std::string_view s) {
  for (char c : s)
    if (static_cast<unsigned char>(c) >= 0x80) return false;
  return true;
}

// Python's str.strip/lstrip/rstrip: whitespace, or the code points of
// `chars`.
std::string_view py_strip(std::string_view s, bool left, bool right,
                          const std::string_view* chars = nullptr) {
  std::vector<uint32_t> set;
  if (chars)
    for (size_t i = 0; i < chars->size();)
      set.push_back(next_cp(*chars, i));
  auto strippable = [&](uint32_t c) {
    return chars ? std::find(set.begin(), set.end(), c) != set.end()
                 : py_space(c);
  };
  // Scans from the ends only: a long content costs what it strips.
  size_t b = 0, e = s.size();
  if (left) {
    while (b < e) {
      size_t i = b;
      if (!strippable(next_cp(s, i))) break;
      b = i;
    }
  }
  if (right) {
    while (e > b) {
      size_t st = e - 1;
      while (st > b && e - st < 4 &&
             (static_cast<unsigned char>(s[st]) & 0xc0) == 0x80)
        --st;
      size_t i = st;
      uint32_t c = next_cp(s, i);
      if (i != e) {  // not one code point: the stray last byte alone
        st = e - 1;
        c = static_cast<unsigned char>(s[st]);
      }
      if (!strippable(c)) break;
      e = st;
    }
  }
  return s.substr(b, e - b);
}

// ---------------------------------------------------------------- numbers

// Python's repr(float).
std::string float_repr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d < 0 ? "-inf" : "inf";
  if (d == 0) return std::signbit(d) ? "-0.0" : "0.0";
  char buf[40];
  for (int prec = 1; prec <= 17; ++prec) {
    std::snprintf(buf, sizeof buf, "%.*e", prec - 1, d);
    if (std::strtod(buf, nullptr) == d) break;
  }
  std::string s = buf;
  bool neg = s[0] == '-';
  if (neg) s.erase(0, 1);
  size_t epos = s.find('e');
  int exp = std::atoi(s.c_str() + epos + 1);
  std::string digits;
  for (size_t i = 0; i < epos; ++i)
    if (s[i] != '.') digits += s[i];
  while (digits.size() > 1 && digits.back() == '0')
    digits.pop_back();
  std::string out = neg ? "-" : "";
  if (exp >= -4 && exp < 16) {
    if (exp >= 0) {
      std::string ip = digits.substr(
          0, std::min(digits.size(), static_cast<size_t>(exp + 1)));
      while (ip.size() < static_cast<size_t>(exp + 1))
        ip += '0';
      std::string fp = digits.size() > static_cast<size_t>(exp + 1)
                           ? digits.substr(exp + 1)
                           : "0";
      out += ip + "." + fp;
    } else {
      out += "0." + std::string(static_cast<size_t>(-exp - 1), '0') + digits;
    }
  } else {
    out += digits.substr(0, 1);
    if (digits.size() > 1) out += "." + digits.substr(1);
    char eb[16];
    std::snprintf(eb, sizeof eb, "e%c%02d", exp < 0 ? '-' : '+', std::abs(exp));
    out += eb;
  }
  return out;
}

// ---------------------------------------------------------------- values

struct Value;
struct Renderer;
using ValueList = std::vector<Value>;
using ValueDict = std::vector<std::pair<std::string, Value>>;
struct Args;
struct Func {
  std::string name;
  std::function<Value(Renderer&, Args&)> call;
};

enum class VT : uint8_t {
  undefined,
  none,
  boolean,
  integer,
  floating,
  string,
  list,
  dict,
  ns,
  func,
  loop
};
// Python sequences this renderer tells apart: a list, a tuple, a one-shot
// generator (map, select...), a range, a dict view (items(), keys()).
enum class LT : uint8_t { list, tuple, generator, range, view };

struct Value {
  VT t = VT::undefined;
  LT lt = LT::list;
  bool b = false;
  int64_t i = 0;
  double f = 0;
  std::string_view sv;                     // string
  std::shared_ptr<const std::string> own;  // keeps sv alive if not borrowed
  const ojson* j = nullptr;                // a list or dict of the context
  std::shared_ptr<ValueList> list;
  std::shared_ptr<ValueDict> dict;  // dict, namespace attributes, loop fields
  std::shared_ptr<const Func> fn;
  std::shared_ptr<bool> used;              // generator already iterated
  std::shared_ptr<const std::string> why;  // undefined: what was missing
};

Value v_undef(std::string why) {
  Value v;
  v.why = std::make_shared<const std::string>(std::move(why));
  return v;
}
Value v_none() {
  Value v;
  v.t = VT::none;
  return v;
}
Value v_bool(bool b) {
  Value v;
  v.t = VT::boolean;
  v.b = b;
  return v;
}
Value v_int(int64_t i) {
  Value v;
  v.t = VT::integer;
  v.i = i;
  return v;
}
Value v_float(double f) {
  Value v;
  v.t = VT::floating;
  v.f = f;
  return v;
}
Value v_str(std::string s) {
  Value v;
  v.t = VT::string;
  v.own = std::make_shared<const std::string>(std::move(s));
  v.sv = *v.own;
  return v;
}
// A string that outlives the render (the AST's, the context's).
Value v_borrow(std::string_view s) {
  Value v;
  v.t = VT::string;
  v.sv = s;
  return v;
}
// A part of another string value: shares its owner.
Value v_sub(const Value& of, std::string_view part) {
  Value v = v_borrow(part);
  v.own = of.own;
  return v;
}
Value v_list(ValueList items, LT lt = LT::list) {
  Value v;
  v.t = VT::list;
  v.lt = lt;
  v.list = std::make_shared<ValueList>(std::move(items));
  if (lt == LT::generator) v.used = std::make_shared<bool>(false);
  return v;
}
Value v_dict(ValueDict d, VT t = VT::dict) {
  Value v;
  v.t = t;
  v.dict = std::make_shared<ValueDict>(std::move(d));
  return v;
}
Value v_func(std::string name, std::function<Value(Renderer&, Args&)> f) {
  Value v;
  v.t = VT::func;
  v.fn = std::make_shared<const Func>(Func{std::move(name), std::move(f)});
  return v;
}

Value from_json(const ojson& j) {
  switch (j.type()) {
    case ojson::value_t::null:
      return v_none();
    case ojson::value_t::boolean:
      return v_bool(j.get<bool>());
    case ojson::value_t::number_integer:
      return v_int(j.get<int64_t>());
    case ojson::value_t::number_unsigned: {
      auto u = j.get<uint64_t>();
      if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
        throw template_error("chat template: integer " + std::to_string(u) +
                             " in the context is too large");
      return v_int(static_cast<int64_t>(u));
    }
    case ojson::value_t::number_float:
      return v_float(j.get<double>());
    case ojson::value_t::string:
      return v_borrow(j.get_ref<const std::string&>());
    case ojson::value_t::array: {
      Value v;
      v.t = VT::list;
      v.j = &j;
      return v;
    }
    case ojson::value_t::object: {
      Value v;
      v.t = VT::dict;
      v.j = &j;
      return v;
    }
    default:
      throw template_error("chat template: binary data in the context");
  }
}

size_t list_size(const Value& v) {
  return v.j ? v.j->size() : v.list->size();
}
Value list_at(const Value& v, size_t i) {
  return v.j ? from_json((*v.j)[i]) : (*v.list)[i];
}
size_t dict_size(const Value& v) {
  return v.j ? v.j->size() : v.dict->size();
}
std::optional<Value> dict_get(const Value& v, std::string_view key) {
  if (v.j) {
    auto it = v.j->find(key);
    if (it == v.j->end()) return std::nullopt;
    return from_json(*it);
  }
  for (auto& [k, val] : *v.dict)
    if (k == key) return val;
  return std::nullopt;
}
template <class F>
void dict_each(const Value& v, F f) {
  if (v.j) {
    for (auto it = v.j->begin(); it != v.j->end(); ++it)
      f(std::string_view(it.key()), from_json(it.value()));
  } else {
    for (auto& [k, val] : *v.dict)
      f(std::string_view(k), val);
  }
}
const char* type_name(const Value& v) {
  switch (v.t) {
    case VT::undefined:
      return "Undefined";
    case VT::none:
      return "NoneType";
    case VT::boolean:
      return "bool";
    case VT::integer:
      return "int";
    case VT::floating:
      return "float";
    case VT::string:
      return "str";
    case VT::list:
      switch (v.lt) {
        case LT::tuple:
          return "tuple";
        case LT::generator:
          return "generator";
        case LT::range:
          return "range";
        case LT::view:
          return "dict view";
        default:
          return "list";
      }
    case VT::dict:
      return "dict";
    case VT::ns:
      return "Namespace";
    case VT::func:
      return "function";
    case VT::loop:
      return "LoopContext";
  }
  return "?";
}

// ---------------------------------------------------------------- AST

struct Expr;
using ExprP = std::unique_ptr<Expr>;
enum class EK : uint8_t {
  constant,
  name,
  getattr,
  getitem,
  slice,
  call,
  filter,
  test,
  neg,
  pos,
  not_,
  binary,  // op: + - * / // % ** ~
  and_,
  or_,
  compare,  // ops[i] between args[i] and args[i+1]
  cond,     // args: then, condition, [else]
  list,
  tuple,
  dict  // args: key, value, key, value...
};
struct Expr {
  EK k;
  int line = 0;
  std::string name;  // name, attribute, filter, test, binary operator
  Value constant;    // constant (strings borrowed from `text`)
  std::string text;
  bool negated = false;     // test
  std::vector<ExprP> args;  // operands; call/filter/test: [base, positional...]
  std::vector<std::pair<std::string, ExprP>> kwargs;
  std::vector<std::string> ops;  // compare
  int depth = 1;                 // of the subtree, bounded at parse
};

struct Node;
using NodeP = std::unique_ptr<Node>;
using Body = std::vector<NodeP>;
enum class NK : uint8_t {
  text,
  output,
  if_,
  for_,
  set,
  set_block,
  macro,
  break_,
  continue_,
  block  // generation: just its body
};
struct Node {
  NK k;
  int line = 0;
  std::string text;  // text; macro name
  ExprP expr;        // output, set value, for iterable
  ExprP target;      // set target (name, getattr, tuple); for target
  ExprP filter;      // for ... if filter
  std::vector<std::pair<ExprP, Body>> branches;  // if: (condition, body)...
  Body body;
  Body else_body;                   // if without condition / for else
  std::vector<std::string> params;  // macro
  std::vector<ExprP> defaults;      // macro: per param, or null
};

}  // namespace

struct chat_template::program {
  Body body;
};

namespace {

// ---------------------------------------------------------------- lexer

enum class TT : uint8_t {
  text,
  var_begin,
  var_end,
  block_begin,
  block_end,
  name,
  string,
  integer,
  floating,
  op,
  eof
};
struct Token {
  TT t;
  std::string v;
  int line;
  int64_t i = 0;
  double f = 0;
};

constexpr int kMaxDepth = 100;

bool word_start(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}
bool word_char(char c) {
  return word_start(c) || (c >= '0' && c <= '9');
}
bool digit(char c) {
  return c >= '0' && c <= '9';
}

class Lexer {
 public:
  explicit Lexer(std::string_view source) {
    // Jinja: \r\n and \r are newlines, and one trailing newline goes
    // (keep_trailing_newline is off).
    src_.reserve(source.size());
    for (size_t i = 0; i < source.size(); ++i) {
      if (source[i] == '\r') {
        src_ += '\n';
        if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
      } else {
        src_ += source[i];
      }
    }
    if (!src_.empty() && src_.back() == '\n') src_.pop_back();
  }

  std::vector<Token> run() {
    bool line_starting = true;
    while (pos_ < src_.size()) {
      size_t start = find_open(pos_);
      std::string text = src_.substr(pos_, start - pos_);
      if (start == src_.size()) {
        emit_text(text);
        pos_ = start;
        break;
      }
      char kind = src_[start + 1];
      char sign = start + 2 < src_.size() ? src_[start + 2] : '\0';
      if (sign != '-' && sign != '+') sign = '\0';
      // Whitespace control before the tag.
      if (sign == '-') {
        text = std::string(py_strip(text, false, true));
      } else if (sign != '+' && kind != '{') {
        size_t l_pos = text.rfind('\n');
        l_pos = l_pos == std::string::npos ? 0 : l_pos + 1;
        if (l_pos > 0 || line_starting) {
          std::string_view rest = std::string_view(text).substr(l_pos);
          if (!rest.empty() && py_strip(rest, true, true).empty())
            text.resize(l_pos);
        }
      }
      emit_text(text);
      line_ += count_nl(src_, pos_, start);
      pos_ = start + 2 + (sign ? 1 : 0);
      if (kind == '#') {
        line_starting = comment();
      } else if (kind == '%' && raw_block()) {
        line_starting = raw_body();
      } else {
        line_starting = tag(kind == '{');
      }
    }
    tokens_.push_back(Token{TT::eof, "", line_, 0, 0});
    return std::move(tokens_);
  }

 private:
  static int count_nl(std::string_view s, size_t b, size_t e) {
    return static_cast<int>(std::count(s.begin() + b, s.begin() + e, '\n'));
  }

  size_t find_open(size_t from) const {
    for (size_t i = from; i + 1 < src_.size(); ++i)
      if (src_[i] == '{' &&
          (src_[i + 1] == '{' || src_[i + 1] == '%' || src_[i + 1] == '#'))
        return i;
    return src_.size();
  }

  void emit_text(const std::string& text) {
    if (!text.empty()) tokens_.push_back(Token{TT::text, text, line_, 0, 0});
  }

  // Skips Python whitespace from pos_ (after a -%} or -#}); true if the last
  // character skipped was a newline.
  bool skip_space() {
    bool nl = false;
    while (pos_ < src_.size()) {
      size_t i = pos_;
      uint32_t c = next_cp(src_, i);
      if (!py_space(c)) break;
      nl = c == '\n';
      if (nl) ++line_;
      pos_ = i;
    }
    return nl;
  }

  // After "{#": the comment, to its first "#}". Returns line_starting.
  bool comment() {
    size_t end = src_.find("#}", pos_);
    if (end == std::string::npos) fail_at(line_, "missing end of comment tag");
    char sign = end > pos_ && (src_[end - 1] == '-' || src_[end - 1] == '+')
                    ? src_[end - 1]
                    : '\0';
    line_ += count_nl(src_, pos_, end);
    pos_ = end + 2;
    return after_block_end(sign);
  }

  // The end of a block or comment tag: -%} strips what follows, %} drops
  // one newline (trim_blocks), +%} keeps it.
  bool after_block_end(char sign) {
    if (sign == '-') return skip_space();
    if (sign == '\0' && pos_ < src_.size() && src_[pos_] == '\n') {
      ++pos_;
      ++line_;
      return true;
    }
    return false;
  }

  // At "{%" + sign: is it {% raw %}? Consumes it if so.
  bool raw_block() {
    size_t p = pos_;
    while (p < src_.size() &&
           (src_[p] == ' ' || src_[p] == '\t' || src_[p] == '\n'))
      ++p;
    if (src_.compare(p, 3, "raw") != 0 ||
        (p + 3 < src_.size() && word_char(src_[p + 3])))
      return false;
    p += 3;
    while (p < src_.size() &&
           (src_[p] == ' ' || src_[p] == '\t' || src_[p] == '\n'))
      ++p;
    if (src_.compare(p, 3, "-%}") == 0) {
      line_ += count_nl(src_, pos_, p);
      pos_ = p + 3;
      skip_space();
      return true;
    }
    if (src_.compare(p, 2, "%}") == 0) {
      line_ += count_nl(src_, pos_, p);
      pos_ = p + 2;  // Jinja applies no trim_blocks to {% raw %}
      return true;
    }
    fail_at(line_, "malformed raw tag");
  }

  bool raw_body() {
    for (size_t p = pos_; p + 1 < src_.size(); ++p) {
      if (src_[p] != '{' || src_[p + 1] != '%') continue;
      size_t q = p + 2;
      char sign = q < src_.size() && (src_[q] == '-' || src_[q] == '+')
                      ? src_[q++]
                      : '\0';
      while (q < src_.size() &&
             (src_[q] == ' ' || src_[q] == '\t' || src_[q] == '\n'))
        ++q;
      if (src_.compare(q, 6, "endraw") != 0) continue;
      q += 6;
      while (q < src_.size() &&
             (src_[q] == ' ' || src_[q] == '\t' || src_[q] == '\n'))
        ++q;
      char esign = '\0';
      if (q < src_.size() && (src_[q] == '-' || src_[q] == '+'))
        esign = src_[q++];
      if (src_.compare(q, 2, "%}") != 0) continue;
      std::string text = src_.substr(pos_, p - pos_);
      if (sign == '-') {
        text = std::string(py_strip(text, false, true));
      } else if (sign != '+') {
        size_t l_pos = text.rfind('\n');
        l_pos = l_pos == std::string::npos ? 0 : l_pos + 1;
        if (l_pos > 0) {
          std::string_view rest = std::string_view(text).substr(l_pos);
          if (!rest.empty() && py_strip(rest, true, true).empty())
            text.resize(l_pos);
        }
      }
      emit_text(text);
      line_ += count_nl(src_, pos_, q);
      pos_ = q + 2;
      return after_block_end(esign);
    }
    fail_at(line_, "missing end of raw directive");
  }

  // Inside {{ or {%: tokens up to the balanced end. Returns line_starting.
  bool tag(bool variable) {
    tokens_.push_back(
        Token{variable ? TT::var_begin : TT::block_begin, "", line_, 0, 0});
    std::vector<char> balance;
    int open_line = line_;
    while (true) {
      if (pos_ >= src_.size())
        fail_at(open_line, std::string("unexpected end of template, the ") +
                               (variable ? "'{{'" : "'{%'") +
                               " tag is not closed");
      if (balance.empty()) {
        std::string_view rest = std::string_view(src_).substr(pos_);
        if (variable) {
          if (rest.substr(0, 3) == "-}}") {
            tokens_.push_back(Token{TT::var_end, "", line_, 0, 0});
            pos_ += 3;
            return skip_space();
          }
          if (rest.substr(0, 2) == "}}") {
            tokens_.push_back(Token{TT::var_end, "", line_, 0, 0});
            pos_ += 2;
            return false;
          }
        } else {
          char sign = '\0';
          size_t len = 0;
          if (rest.substr(0, 3) == "-%}" || rest.substr(0, 3) == "+%}") {
            sign = rest[0];
            len = 3;
          } else if (rest.substr(0, 2) == "%}") {
            len = 2;
          }
          if (len) {
            tokens_.push_back(Token{TT::block_end, "", line_, 0, 0});
            pos_ += len;
            return after_block_end(sign);
          }
        }
      }
      char c = src_[pos_];
      if (c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f') {
        if (c == '\n') ++line_;
        ++pos_;
        continue;
      }
      if (digit(c)) {
        number();
        continue;
      }
      if (word_start(c)) {
        size_t b = pos_;
        while (pos_ < src_.size() && word_char(src_[pos_]))
          ++pos_;
        tokens_.push_back(
            Token{TT::name, src_.substr(b, pos_ - b), line_, 0, 0});
        continue;
      }
      if (c == '\'' || c == '"') {
        string_literal(c);
        continue;
      }
      static const char* ops[] = {"//", "**", "==", "!=", ">=", "<=", "+",
                                  "-",  "/",  "*",  "%",  "~",  "[",  "]",
                                  "(",  ")",  "{",  "}",  ">",  "<",  "=",
                                  ".",  ":",  "|",  ",",  ";"};
      bool matched = false;
      for (const char* op : ops) {
        size_t n = std::strlen(op);
        if (src_.compare(pos_, n, op) != 0) continue;
        if (n == 1 && (c == '{' || c == '(' || c == '[')) {
          balance.push_back(c == '{' ? '}' : c == '(' ? ')' : ']');
        } else if (n == 1 && (c == '}' || c == ')' || c == ']')) {
          if (balance.empty())
            fail_at(line_, std::string("unexpected '") + c + "'");
          if (balance.back() != c)
            fail_at(line_, std::string("unexpected '") + c + "', expected '" +
                               balance.back() + "'");
          balance.pop_back();
        }
        tokens_.push_back(Token{TT::op, op, line_, 0, 0});
        pos_ += n;
        matched = true;
        break;
      }
      if (!matched) {
        size_t i = pos_;
        uint32_t cp = next_cp(src_, i);
        std::string ch;
        put_cp(ch, cp);
        fail_at(line_, "unexpected character '" + ch + "' in a tag");
      }
    }
  }

  void number() {
    size_t b = pos_;
    auto digits = [&](auto ok) {
      size_t s = pos_;
      while (pos_ < src_.size() &&
             (ok(src_[pos_]) || (src_[pos_] == '_' && pos_ > s &&
                                 pos_ + 1 < src_.size() && ok(src_[pos_ + 1]))))
        ++pos_;
      return pos_ > s;
    };
    auto clean = [&](size_t from) {
      std::string s;
      for (size_t k = from; k < pos_; ++k)
        if (src_[k] != '_') s += src_[k];
      return s;
    };
    if (src_[pos_] == '0' && pos_ + 1 < src_.size() && src_[pos_ + 1] != '\0' &&
        std::strchr("bBoOxX", src_[pos_ + 1])) {
      char base_c = static_cast<char>(std::tolower(src_[pos_ + 1]));
      int base = base_c == 'b' ? 2 : base_c == 'o' ? 8 : 16;
      pos_ += 2;
      size_t s = pos_;
      digits([&](char c) {
        return base == 16 ? std::isxdigit(static_cast<unsigned char>(c)) != 0
                          : (c >= '0' && c < '0' + base);
      });
      if (pos_ == s) fail_at(line_, "malformed number literal");
      errno = 0;
      long long v = std::strtoll(clean(s).c_str(), nullptr, base);
      if (errno) fail_at(line_, "integer literal too large");
      tokens_.push_back(
          Token{TT::integer, src_.substr(b, pos_ - b), line_, v, 0});
      return;
    }
    digits(digit);
    bool is_float = false;
    if (pos_ + 1 < src_.size() && src_[pos_] == '.' && digit(src_[pos_ + 1]) &&
        !(tokens_.size() && tokens_.back().t == TT::op &&
          tokens_.back().v == ".")) {
      ++pos_;
      digits(digit);
      is_float = true;
    }
    if (pos_ < src_.size() && (src_[pos_] == 'e' || src_[pos_] == 'E')) {
      size_t save = pos_;
      ++pos_;
      if (pos_ < src_.size() && (src_[pos_] == '+' || src_[pos_] == '-'))
        ++pos_;
      if (digits(digit)) {
        is_float = true;
      } else {
        pos_ = save;
      }
    }
    std::string s = clean(b);
    if (is_float) {
      tokens_.push_back(
          Token{TT::floating, s, line_, 0, std::strtod(s.c_str(), nullptr)});
    } else {
      errno = 0;
      long long v = std::strtoll(s.c_str(), nullptr, 10);
      if (errno) fail_at(line_, "integer literal too large");
      tokens_.push_back(Token{TT::integer, s, line_, v, 0});
    }
  }

  // Python's unicode-escape decoding of a string literal.
  void string_literal(char quote) {
    int line = line_;
    ++pos_;
    std::string out;
    while (true) {
      if (pos_ >= src_.size()) fail_at(line, "unterminated string literal");
      char c = src_[pos_];
      if (c == quote) {
        ++pos_;
        break;
      }
      if (c == '\n') ++line_;
      if (c != '\\') {
        out += c;
        ++pos_;
        continue;
      }
      if (pos_ + 1 >= src_.size()) fail_at(line, "unterminated string literal");
      char e = src_[pos_ + 1];
      pos_ += 2;
      auto hex = [&](int n) {
        if (pos_ + n > src_.size())
          fail_at(line, "truncated \\x, \\u or \\U escape");
        uint32_t v = 0;
        for (int k = 0; k < n; ++k) {
          char h = src_[pos_ + k];
          if (!std::isxdigit(static_cast<unsigned char>(h)))
            fail_at(line, "truncated \\x, \\u or \\U escape");
          v = v * 16 +
              static_cast<uint32_t>(std::isdigit(static_cast<unsigned char>(h))
                                        ? h - '0'
                                        : std::tolower(h) - 'a' + 10);
        }
        pos_ += n;
        if (v > 0x10ffff || (v >= 0xd800 && v <= 0xdfff))
          fail_at(line,
                  "escape of a surrogate or beyond Unicode is not supported");
        put_cp(out, v);
      };
      switch (e) {
        case '\n':
          ++line_;
          break;  // line continuation
        case '\\':
          out += '\\';
          break;
        case '\'':
          out += '\'';
          break;
        case '"':
          out += '"';
          break;
        case 'a':
          out += '\a';
          break;
        case 'b':
          out += '\b';
          break;
        case 'f':
          out += '\f';
          break;
        case 'n':
          out += '\n';
          break;
        case 'r':
          out += '\r';
          break;
        case 't':
          out += '\t';
          break;
        case 'v':
          out += '\v';
          break;
        case 'x':
          hex(2);
          break;
        case 'u':
          hex(4);
          break;
        case 'U':
          hex(8);
          break;
        case 'N':
          fail_at(line, "the \\N{...} escape is not supported");
        default:
          if (e >= '0' && e <= '7') {
            uint32_t v = static_cast<uint32_t>(e - '0');
            for (int k = 0; k < 2 && pos_ < src_.size() && src_[pos_] >= '0' &&
                            src_[pos_] <= '7';
                 ++k)
              v = v * 8 + static_cast<uint32_t>(src_[pos_++] - '0');
            put_cp(out, v);
          } else if (static_cast<unsigned char>(e) >= 0x80) {
            fail_at(
                line,
                "a backslash before a non-ASCII character is not supported");
          } else {
            out += '\\';  // Python keeps an unknown escape as it is
            out += e;
          }
      }
    }
    tokens_.push_back(Token{TT::string, out, line, 0, 0});
  }

  std::string src_;
  size_t pos_ = 0;
  int line_ = 1;
  std::vector<Token> tokens_;
};

// ---------------------------------------------------------------- parser

const std::set<std::string, std::less<>> kFilters = {
    "abs",     "capitalize", "count", "d",      "default",    "first",
    "float",   "indent",     "int",   "items",  "join",       "last",
    "length",  "list",       "lower", "map",    "reject",     "rejectattr",
    "replace", "reverse",    "safe",  "select", "selectattr", "string",
    "title",   "tojson",     "trim",  "upper",  "unique",     "dictsort"};
const std::set<std::string, std::less<>> kTests = {
    "defined",  "undefined", "none",   "boolean",     "false",    "true",
    "integer",  "float",     "number", "string",      "mapping",  "iterable",
    "sequence", "callable",  "sameas", "in",          "eq",       "equalto",
    "==",       "ne",        "!=",     "lt",          "lessthan", "<",
    "le",       "<=",        "gt",     "greaterthan", ">",        "ge",
    ">=",       "odd",       "even",   "divisibleby", "lower",    "upper"};
// Tests that take an argument.
const std::set<std::string, std::less<>> kTestsWithArg = {
    "sameas", "in",          "eq",       "equalto", "==", "ne",
    "!=",     "lt",          "lessthan", "<",       "le", "<=",
    "gt",     "greaterthan", ">",        "ge",      ">=", "divisibleby"};
const std::set<std::string, std::less<>> kGlobals = {
    "range", "namespace", "dict", "raise_exception", "strftime_now"};
const std::set<std::string, std::less<>> kMethods = {
    "startswith", "endswith", "strip", "lstrip", "rstrip",
    "split",      "upper",    "lower", "title",  "capitalize",
    "replace",    "items",    "keys",  "values", "get"};

class Parser {
 public:
  explicit Parser(std::vector<Token> tokens) : t_(std::move(tokens)) {}

  Body run() {
    Body body = subparse({});
    if (cur().t != TT::eof) fail_at(cur().line, "unexpected tag");
    for (auto& n : body)
      check_depth(*n, 0);
    if (!safe_lines_.empty())
      fail_at(safe_lines_.front(),
              "filter 'safe' is only supported as the last filter of a {{ }}");
    // Calls name a global function or one of the template's macros.
    for (auto& [name, line] : called_)
      if (!kGlobals.count(name) && !macros_.count(name))
        fail_at(line, "function '" + name + "' is not supported");
    return body;
  }

 private:
  // Bounds the evaluator's recursion: chains like a+a+...+a or x|f|f|...|f
  // nest as deep as they are long.
  static constexpr int kMaxExprDepth = 200;
  static void check_depth(const Expr& e, int d) {
    if (d > kMaxExprDepth)
      fail_at(e.line, "expression nested deeper than " +
                          std::to_string(kMaxExprDepth) + " levels");
    for (auto& a : e.args)
      if (a) check_depth(*a, d + 1);
    for (auto& kv : e.kwargs)
      check_depth(*kv.second, d + 1);
  }
  static void check_depth(const Node& n, int d) {
    for (const ExprP* e : {&n.expr, &n.target, &n.filter})
      if (*e) check_depth(**e, d);
    for (auto& [c, b] : n.branches) {
      check_depth(*c, d);
      for (auto& x : b)
        check_depth(*x, d);
    }
    for (const Body* b : {&n.body, &n.else_body})
      for (auto& x : *b)
        check_depth(*x, d);
    for (auto& e : n.defaults)
      if (e) check_depth(*e, d);
  }

  // Computes a finished node's depth from its (finished) children, so that
  // no tree deeper than kMaxExprDepth is ever built.
  static ExprP seal(ExprP e) {
    int d = 0;
    for (auto& a : e->args)
      if (a) d = std::max(d, a->depth);
    for (auto& kv : e->kwargs)
      d = std::max(d, kv.second->depth);
    e->depth = d + 1;
    if (e->depth > kMaxExprDepth)
      fail_at(e->line, "expression nested deeper than " +
                           std::to_string(kMaxExprDepth) + " levels");
    return e;
  }

  const Token& cur() const { return t_[p_]; }
  const Token& peek(size_t n = 1) const {
    return t_[std::min(p_ + n, t_.size() - 1)];
  }
  Token next() { return t_[p_ < t_.size() - 1 ? p_++ : p_]; }
  bool is_op(const char* op) const {
    return cur().t == TT::op && cur().v == op;
  }
  bool is_name(const char* n) const {
    return cur().t == TT::name && cur().v == n;
  }
  static std::string describe(const Token& t) {
    switch (t.t) {
      case TT::eof:
        return "end of template";
      case TT::block_end:
        return "'%}'";
      case TT::var_end:
        return "'}}'";
      case TT::text:
        return "template text";
      default:
        return "'" + t.v + "'";
    }
  }
  void expect_op(const char* op) {
    if (!is_op(op))
      fail_at(cur().line,
              std::string("expected '") + op + "', got " + describe(cur()));
    next();
  }
  std::string expect_name() {
    if (cur().t != TT::name)
      fail_at(cur().line, "expected a name, got " + describe(cur()));
    return next().v;
  }
  void expect_block_end() {
    if (cur().t != TT::block_end)
      fail_at(cur().line, "expected '%}', got " + describe(cur()));
    next();
  }

  struct DepthGuard {
    Parser& p;
    explicit DepthGuard(Parser& parser, int line) : p(parser) {
      if (++p.depth_ > kMaxDepth)
        fail_at(line, "template nested deeper than " +
                          std::to_string(kMaxDepth) + " levels");
    }
    ~DepthGuard() { --p.depth_; }
  };

  // Statements until one of `ends` (a block tag name) or the end.
  Body subparse(const std::vector<std::string>& ends) {
    Body body;
    while (true) {
      const Token& tk = cur();
      if (tk.t == TT::eof) {
        if (!ends.empty()) {
          std::string want = ends.front();
          for (auto& e : ends)
            if (e.rfind("end", 0) == 0) want = e;
          fail_at(tk.line,
                  "unexpected end of template, expected '" + want + "'");
        }
        return body;
      }
      if (tk.t == TT::text) {
        auto n = std::make_unique<Node>();
        n->k = NK::text;
        n->line = tk.line;
        n->text = tk.v;
        next();
        body.push_back(std::move(n));
      } else if (tk.t == TT::var_begin) {
        next();
        auto n = std::make_unique<Node>();
        n->k = NK::output;
        n->line = tk.line;
        n->expr = parse_tuple(true);
        // Markup in a template without autoescape prints as its text, but
        // Markup + str escapes the str: only printing it is supported.
        if (n->expr->k == EK::filter && n->expr->name == "safe" &&
            n->expr->args.size() == 1 && n->expr->kwargs.empty()) {
          safe_lines_.pop_back();
          ExprP base = std::move(n->expr->args[0]);
          n->expr = std::move(base);
        }
        if (cur().t != TT::var_end)
          fail_at(cur().line, "expected '}}', got " + describe(cur()));
        next();
        body.push_back(std::move(n));
      } else if (tk.t == TT::block_begin) {
        const Token& name = peek();
        if (name.t == TT::name &&
            std::find(ends.begin(), ends.end(), name.v) != ends.end()) {
          next();  // leaves the end tag's name as cur()
          return body;
        }
        next();
        body.push_back(statement());
      } else {
        fail_at(tk.line, "unexpected " + describe(tk));
      }
    }
  }

  NodeP statement() {
    const Token& tk = cur();
    int line = tk.line;
    if (tk.t != TT::name)
      fail_at(line, "expected a tag name, got " + describe(tk));
    std::string tag = tk.v;
    DepthGuard guard(*this, line);
    next();
    auto n = std::make_unique<Node>();
    n->line = line;
    if (tag == "if") {
      n->k = NK::if_;
      while (true) {
        ExprP cond = parse_tuple(false);
        expect_block_end();
        Body b = subparse({"elif", "else", "endif"});
        n->branches.emplace_back(std::move(cond), std::move(b));
        std::string end = next().v;
        if (end == "elif") continue;
        if (end == "else") {
          expect_block_end();
          n->else_body = subparse({"endif"});
          next();
        }
        break;
      }
      expect_block_end();
    } else if (tag == "for") {
      n->k = NK::for_;
      n->target = parse_assign_target(true);
      if (!is_name("in"))
        fail_at(cur().line,
                "expected 'in' in the for tag, got " + describe(cur()));
      next();
      n->expr = parse_tuple(false, /*no_cond=*/true);
      if (is_name("if")) {
        next();
        n->filter = parse_expression(true);
      }
      if (is_name("recursive"))
        fail_at(cur().line, "recursive for loops are not supported");
      expect_block_end();
      ++loops_;
      n->body = subparse({"endfor", "else"});
      --loops_;
      if (next().v == "else") {
        expect_block_end();
        n->else_body = subparse({"endfor"});
        next();
      }
      expect_block_end();
    } else if (tag == "set") {
      n->target = parse_assign_target(false);
      if (is_op("=")) {
        next();
        n->k = NK::set;
        n->expr = parse_tuple(true);
        expect_block_end();
      } else {
        if (n->target->k != EK::name)
          fail_at(line, "a set block assigns one name");
        if (is_op("|"))
          fail_at(line, "filters on a set block are not supported");
        expect_block_end();
        n->k = NK::set_block;
        n->body = subparse({"endset"});
        next();
        expect_block_end();
      }
    } else if (tag == "macro") {
      n->k = NK::macro;
      n->text = expect_name();
      macros_.insert(n->text);
      expect_op("(");
      while (!is_op(")")) {
        if (!n->params.empty()) expect_op(",");
        if (is_op(")")) break;
        n->params.push_back(expect_name());
        if (is_op("=")) {
          next();
          n->defaults.push_back(parse_expression(true));
        } else {
          n->defaults.push_back(nullptr);
        }
      }
      next();
      expect_block_end();
      ++macro_depth_;
      int loops = loops_;
      loops_ = 0;
      n->body = subparse({"endmacro"});
      loops_ = loops;
      --macro_depth_;
      next();
      if (cur().t == TT::name && cur().v == n->text) next();
      expect_block_end();
    } else if (tag == "break" || tag == "continue") {
      if (loops_ == 0) fail_at(line, "'" + tag + "' outside of a for loop");
      n->k = tag == "break" ? NK::break_ : NK::continue_;
      expect_block_end();
    } else if (tag == "generation") {
      // transformers' tag marking the assistant's tokens: renders its body.
      n->k = NK::block;
      expect_block_end();
      n->body = subparse({"endgeneration"});
      next();
      expect_block_end();
    } else if (tag == "elif" || tag == "else" || tag.rfind("end", 0) == 0) {
      fail_at(line, "unexpected tag '" + tag + "'");
    } else {
      fail_at(line, "tag '" + tag + "' is not supported");
    }
    return n;
  }

  // A name, ns.attr (set only), or names separated by commas.
  ExprP parse_assign_target(bool for_loop) {
    int line = cur().line;
    auto one = [&]() {
      auto e = std::make_unique<Expr>();
      e->line = cur().line;
      e->k = EK::name;
      e->name = expect_name();
      if (!for_loop && is_op(".")) {
        next();
        auto g = std::make_unique<Expr>();
        g->k = EK::getattr;
        g->line = e->line;
        g->name = expect_name();
        g->args.push_back(std::move(e));
        return g;
      }
      return e;
    };
    bool paren = is_op("(");
    if (paren) next();
    ExprP first = one();
    if (!is_op(",") && !paren) return first;
    auto t = std::make_unique<Expr>();
    t->k = EK::tuple;
    t->line = line;
    t->args.push_back(std::move(first));
    while (is_op(",")) {
      next();
      if (cur().t != TT::name) break;
      t->args.push_back(one());
    }
    if (paren) expect_op(")");
    for (auto& a : t->args)
      if (a->k != EK::name)
        fail_at(line, "assigning to several attributes is not supported");
    return t;
  }

  // expression (',' expression)* : a tuple if there is a comma.
  ExprP parse_tuple(bool with_cond, bool no_cond = false) {
    int line = cur().line;
    ExprP first = no_cond ? parse_or() : parse_expression(with_cond);
    if (!is_op(",")) return first;
    auto t = std::make_unique<Expr>();
    t->k = EK::tuple;
    t->line = line;
    t->args.push_back(std::move(first));
    while (is_op(",")) {
      next();
      if (cur().t == TT::block_end || cur().t == TT::var_end || is_op(")") ||
          is_name("in") || is_op("="))
        break;
      t->args.push_back(no_cond ? parse_or() : parse_expression(with_cond));
    }
    return seal(std::move(t));
  }

  ExprP parse_expression(bool with_cond = true) {
    DepthGuard guard(*this, cur().line);
    ExprP e = parse_or();
    if (!with_cond) return e;
    while (is_name("if")) {
      int line = cur().line;
      next();
      auto c = std::make_unique<Expr>();
      c->k = EK::cond;
      c->line = line;
      c->args.push_back(std::move(e));
      c->args.push_back(parse_or());
      if (is_name("else")) {
        next();
        c->args.push_back(parse_expression(true));
      }
      e = seal(std::move(c));
    }
    return e;
  }

  ExprP binary(EK k, std::string op, ExprP l, ExprP r, int line) {
    auto e = std::make_unique<Expr>();
    e->k = k;
    e->line = line;
    e->name = std::move(op);
    e->args.push_back(std::move(l));
    e->args.push_back(std::move(r));
    return seal(std::move(e));
  }

  ExprP parse_or() {
    ExprP l = parse_and();
    while (is_name("or")) {
      int line = next().line;
      l = binary(EK::or_, "or", std::move(l), parse_and(), line);
    }
    return l;
  }
  ExprP parse_and() {
    ExprP l = parse_not();
    while (is_name("and")) {
      int line = next().line;
      l = binary(EK::and_, "and", std::move(l), parse_not(), line);
    }
    return l;
  }
  ExprP parse_not() {
    if (is_name("not")) {
      int line = next().line;
      DepthGuard guard(*this, line);
      auto e = std::make_unique<Expr>();
      e->k = EK::not_;
      e->line = line;
      e->args.push_back(parse_not());
      return seal(std::move(e));
    }
    return parse_compare();
  }
  ExprP parse_compare() {
    int line = cur().line;
    ExprP first = parse_math1();
    std::unique_ptr<Expr> cmp;
    while (true) {
      std::string op;
      if (cur().t == TT::op &&
          (cur().v == "==" || cur().v == "!=" || cur().v == "<" ||
           cur().v == ">" || cur().v == "<=" || cur().v == ">=")) {
        op = next().v;
      } else if (is_name("in")) {
        next();
        op = "in";
      } else if (is_name("not") && peek().t == TT::name && peek().v == "in") {
        next();
        next();
        op = "not in";
      } else {
        break;
      }
      if (!cmp) {
        cmp = std::make_unique<Expr>();
        cmp->k = EK::compare;
        cmp->line = line;
        cmp->args.push_back(std::move(first));
      }
      cmp->ops.push_back(op);
      cmp->args.push_back(parse_math1());
    }
    return cmp ? seal(std::move(cmp)) : std::move(first);
  }
  ExprP parse_math1() {
    ExprP l = parse_concat();
    while (is_op("+") || is_op("-")) {
      Token op = next();
      l = binary(EK::binary, op.v, std::move(l), parse_concat(), op.line);
    }
    return l;
  }
  ExprP parse_concat() {
    ExprP l = parse_math2();
    while (is_op("~")) {
      Token op = next();
      l = binary(EK::binary, "~", std::move(l), parse_math2(), op.line);
    }
    return l;
  }
  ExprP parse_math2() {
    ExprP l = parse_pow();
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      Token op = next();
      l = binary(EK::binary, op.v, std::move(l), parse_pow(), op.line);
    }
    return l;
  }
  ExprP parse_pow() {
    ExprP l = parse_unary(true);
    while (is_op("**")) {
      Token op = next();
      l = binary(EK::binary, "**", std::move(l), parse_unary(true), op.line);
    }
    return l;
  }
  ExprP parse_unary(bool with_filter) {
    int line = cur().line;
    DepthGuard guard(*this, line);
    ExprP node;
    if (is_op("-") || is_op("+")) {
      bool neg = next().v == "-";
      node = std::make_unique<Expr>();
      node->k = neg ? EK::neg : EK::pos;
      node->line = line;
      node->args.push_back(parse_unary(false));
      node = seal(std::move(node));
    } else {
      node = parse_primary();
    }
    node = parse_postfix(std::move(node));
    if (with_filter) node = parse_filter_expr(std::move(node));
    return node;
  }

  ExprP constant(Value v, int line) {
    auto e = std::make_unique<Expr>();
    e->k = EK::constant;
    e->line = line;
    e->constant = std::move(v);
    return e;
  }

  ExprP parse_primary() {
    const Token& tk = cur();
    int line = tk.line;
    if (tk.t == TT::name) {
      std::string n = next().v;
      if (n == "true" || n == "True") return constant(v_bool(true), line);
      if (n == "false" || n == "False") return constant(v_bool(false), line);
      if (n == "none" || n == "None") return constant(v_none(), line);
      if (macro_depth_ && (n == "varargs" || n == "kwargs" || n == "caller"))
        fail_at(line, "a macro's '" + n + "' is not supported");
      auto e = std::make_unique<Expr>();
      e->k = EK::name;
      e->line = line;
      e->name = n;
      return e;
    }
    if (tk.t == TT::string) {
      auto e = std::make_unique<Expr>();
      e->k = EK::constant;
      e->line = line;
      while (cur().t == TT::string)
        e->text += next().v;  // 'a' 'b' is 'ab'
      e->constant = v_borrow(e->text);
      return e;
    }
    if (tk.t == TT::integer) return constant(v_int(next().i), line);
    if (tk.t == TT::floating) return constant(v_float(next().f), line);
    if (is_op("(")) {
      next();
      if (is_op(")")) {
        next();
        auto t = std::make_unique<Expr>();
        t->k = EK::tuple;
        t->line = line;
        return t;
      }
      ExprP first = parse_expression(true);
      if (is_op(")")) {
        next();
        return first;
      }
      auto t = std::make_unique<Expr>();
      t->k = EK::tuple;
      t->line = line;
      t->args.push_back(std::move(first));
      while (is_op(",")) {
        next();
        if (is_op(")")) break;
        t->args.push_back(parse_expression(true));
      }
      expect_op(")");
      return seal(std::move(t));
    }
    if (is_op("[")) {
      next();
      auto l = std::make_unique<Expr>();
      l->k = EK::list;
      l->line = line;
      while (!is_op("]")) {
        if (!l->args.empty()) {
          expect_op(",");
          if (is_op("]")) break;
        }
        l->args.push_back(parse_expression(true));
      }
      next();
      return seal(std::move(l));
    }
    if (is_op("{")) {
      next();
      auto d = std::make_unique<Expr>();
      d->k = EK::dict;
      d->line = line;
      while (!is_op("}")) {
        if (!d->args.empty()) {
          expect_op(",");
          if (is_op("}")) break;
        }
        d->args.push_back(parse_expression(true));
        expect_op(":");
        d->args.push_back(parse_expression(true));
      }
      next();
      return seal(std::move(d));
    }
    fail_at(line, "unexpected " + describe(tk));
  }

  ExprP parse_postfix(ExprP node) {
    while (true) {
      int line = cur().line;
      if (is_op(".")) {
        next();
        auto e = std::make_unique<Expr>();
        e->line = line;
        if (cur().t == TT::name) {
          e->k = EK::getattr;
          e->name = next().v;
        } else if (cur().t == TT::integer) {
          e->k = EK::getitem;
          e->args.push_back(nullptr);
          e->args.push_back(constant(v_int(next().i), line));
          e->args[0] = std::move(node);
          node = seal(std::move(e));
          continue;
        } else {
          fail_at(line, "expected an attribute name after '.'");
        }
        e->args.push_back(std::move(node));
        node = seal(std::move(e));
      } else if (is_op("[")) {
        next();
        node = parse_subscript(std::move(node), line);
      } else if (is_op("(")) {
        node = parse_call(std::move(node));
      } else {
        return node;
      }
    }
  }

  ExprP parse_subscript(ExprP node, int line) {
    auto e = std::make_unique<Expr>();
    e->line = line;
    e->args.push_back(std::move(node));
    ExprP first;
    if (!is_op(":")) first = parse_expression(true);
    if (is_op(":")) {
      e->k = EK::slice;
      e->args.push_back(std::move(first));
      next();
      e->args.push_back(is_op("]") || is_op(":") ? nullptr
                                                 : parse_expression(true));
      if (is_op(":")) {
        next();
        e->args.push_back(is_op("]") ? nullptr : parse_expression(true));
      } else {
        e->args.push_back(nullptr);
      }
    } else {
      if (is_op(",")) fail_at(line, "a tuple as a subscript is not supported");
      e->k = EK::getitem;
      e->args.push_back(std::move(first));
    }
    expect_op("]");
    return seal(std::move(e));
  }

  // Arguments of a call, filter or test into e->args (after the base) and
  // e->kwargs.
  void parse_args(Expr& e) {
    expect_op("(");
    bool first = true;
    while (!is_op(")")) {
      if (!first) {
        expect_op(",");
        if (is_op(")")) break;
      }
      first = false;
      if (is_op("*") || is_op("**"))
        fail_at(cur().line, "'*' and '**' arguments are not supported");
      if (cur().t == TT::name && peek().t == TT::op && peek().v == "=") {
        std::string key = next().v;
        next();
        e.kwargs.emplace_back(key, parse_expression(true));
      } else {
        if (!e.kwargs.empty())
          fail_at(cur().line, "a positional argument after a keyword argument");
        e.args.push_back(parse_expression(true));
      }
    }
    next();
  }

  ExprP parse_call(ExprP callee) {
    auto e = std::make_unique<Expr>();
    e->k = EK::call;
    e->line = cur().line;
    if (callee->k == EK::name) {
      called_.emplace_back(callee->name, e->line);
    } else if (callee->k == EK::getattr) {
      if (!kMethods.count(callee->name))
        fail_at(e->line, "method '" + callee->name + "' is not supported");
    } else {
      fail_at(e->line, "calling this expression is not supported");
    }
    e->args.push_back(std::move(callee));
    parse_args(*e);
    return seal(std::move(e));
  }

  ExprP parse_filter_expr(ExprP node) {
    while (true) {
      if (is_op("|")) {
        next();
        auto e = std::make_unique<Expr>();
        e->k = EK::filter;
        e->line = cur().line;
        e->name = expect_name();
        while (is_op(".")) {
          next();
          e->name += "." + expect_name();
        }
        if (!kFilters.count(e->name))
          fail_at(e->line, "filter '" + e->name + "' is not supported");
        if (e->name == "safe") safe_lines_.push_back(e->line);
        e->args.push_back(std::move(node));
        if (is_op("(")) parse_args(*e);
        node = seal(std::move(e));
      } else if (is_name("is")) {
        next();
        auto e = std::make_unique<Expr>();
        e->k = EK::test;
        e->line = cur().line;
        if (is_name("not")) {
          next();
          e->negated = true;
        }
        if (cur().t == TT::name) {
          e->name = next().v;
        } else if (cur().t == TT::op &&
                   (cur().v == "==" || cur().v == "!=" || cur().v == "<" ||
                    cur().v == ">" || cur().v == "<=" || cur().v == ">=")) {
          e->name = next().v;  // Jinja registers these test names too
        } else {
          fail_at(e->line, "expected a test name after 'is'");
        }
        if (!kTests.count(e->name))
          fail_at(e->line, "test '" + e->name + "' is not supported");
        e->args.push_back(std::move(node));
        if (is_op("(")) {
          parse_args(*e);
        } else if ((cur().t == TT::name || cur().t == TT::string ||
                    cur().t == TT::integer || cur().t == TT::floating ||
                    is_op("(") || is_op("[") || is_op("{")) &&
                   !is_name("else") && !is_name("or") && !is_name("and")) {
          if (is_name("is"))
            fail_at(e->line, "tests cannot be chained with 'is'");
          e->args.push_back(parse_postfix(parse_primary()));
        }
        size_t nargs = e->args.size() - 1 + e->kwargs.size();
        if (!kTestsWithArg.count(e->name) && nargs > 0)
          fail_at(e->line, "test '" + e->name + "' takes no argument");
        if (kTestsWithArg.count(e->name) && nargs != 1)
          fail_at(e->line, "test '" + e->name + "' takes one argument");
        node = seal(std::move(e));
      } else if (is_op("(")) {
        node = parse_call(std::move(node));
      } else {
        return node;
      }
    }
  }

  std::vector<Token> t_;
  size_t p_ = 0;
  int depth_ = 0;
  int loops_ = 0;
  int macro_depth_ = 0;
  std::set<std::string> macros_;
  std::vector<std::pair<std::string, int>> called_;
  std::vector<int> safe_lines_;
};

// ---------------------------------------------------------------- runtime

struct Args {
  std::vector<Value> pos;
  std::vector<std::pair<std::string, Value>> kw;
  int line = 0;
  std::string what;  // "filter 'x'" for messages

  // The argument at position `idx` or named `name`, if given.
  std::optional<Value> get(size_t idx, const char* name) {
    if (idx < pos.size()) return pos[idx];
    for (auto& [k, v] : kw)
      if (k == name) return v;
    return std::nullopt;
  }
  // Refuses arguments beyond `names`.
  void allow(std::initializer_list<const char*> names) {
    if (pos.size() > names.size())
      fail_at(line, what + " takes at most " + std::to_string(names.size()) +
                        " arguments, got " + std::to_string(pos.size()));
    for (auto& [k, v] : kw) {
      bool ok = false;
      size_t idx = 0;
      for (const char* n : names) {
        if (k == n) ok = idx >= pos.size();
        ++idx;
      }
      if (!ok) fail_at(line, what + " got an unexpected argument '" + k + "'");
    }
  }
};

enum class Flow { normal, break_, continue_ };

struct Scope {
  std::vector<std::pair<std::string, Value>> vars;
  Value* find(std::string_view n) {
    for (auto& [k, v] : vars)
      if (k == n) return &v;
    return nullptr;
  }
  void set(std::string_view n, Value v) {
    if (Value* slot = find(n)) {
      *slot = std::move(v);
    } else {
      vars.emplace_back(std::string(n), std::move(v));
    }
  }
};

struct Renderer {
  const ojson& ctx;
  const chat_template_render_options& opt;
  std::vector<Scope> scopes;  // [0]: the template's top level
  Scope builtins;
  size_t steps = 0;
  int call_depth = 0;
  std::vector<const Node*> macro_defs;

  Renderer(const ojson& c, const chat_template_render_options& o)
      : ctx(c), opt(o) {
    scopes.emplace_back();
    install_builtins();
  }

  [[noreturn]] void undefined_error(const Value& v, int line) {
    fail_at(line, v.why ? *v.why : std::string("value is undefined"));
  }

  void step(int line) {
    if (++steps > opt.max_steps)
      bound_at(line, "the template exceeded its budget of " +
                         std::to_string(opt.max_steps) + " evaluation steps");
  }
  void check_size(size_t n, int line) {
    if (n > opt.max_output)
      bound_at(line, "the output would exceed " +
                         std::to_string(opt.max_output) + " bytes");
  }

  Value lookup(std::string_view name) {
    for (size_t k = scopes.size(); k-- > 0;)
      if (Value* v = scopes[k].find(name)) return *v;
    if (ctx.is_object()) {
      auto it = ctx.find(name);
      if (it != ctx.end()) return from_json(*it);
    }
    if (Value* v = builtins.find(name)) return *v;
    return v_undef("'" + std::string(name) + "' is undefined");
  }

  // ------------------------------------------------------------ str/repr

  void repr_str(std::string_view s, std::string& out) {
    bool has_sq = s.find('\'') != std::string_view::npos;
    bool has_dq = s.find('"') != std::string_view::npos;
    char q = has_sq && !has_dq ? '"' : '\'';
    out += q;
    for (size_t i = 0; i < s.size();) {
      size_t b = i;
      uint32_t c = next_cp(s, i);
      char buf[16];
      if (c == static_cast<uint32_t>(q) || c == '\\') {
        out += '\\';
        out += static_cast<char>(c);
      } else if (c == '\t') {
        out += "\\t";
      } else if (c == '\n') {
        out += "\\n";
      } else if (c == '\r') {
        out += "\\r";
      } else if (!py_printable(c)) {
        if (c <= 0xff)
          std::snprintf(buf, sizeof buf, "\\x%02x", c);
        else if (c <= 0xffff)
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
        else
          std::snprintf(buf, sizeof buf, "\\U%08x", c);
        out += buf;
      } else {
        out.append(s.substr(b, i - b));
      }
    }
    out += q;
  }

  void to_str(const Value& v, std::string& out, int line, bool repr = false,
              int depth = 0) {
    if (depth > 512) bound_at(line, "value nested too deeply");
    switch (v.t) {
      case VT::undefined:
        if (repr)
          gap_at(line,
                 "printing an undefined value inside a container is not "
                 "supported");
        return;
      case VT::none:
        out += "None";
        return;
      case VT::boolean:
        out += v.b ? "True" : "False";
        return;
      case VT::integer:
        out += std::to_string(v.i);
        return;
      case VT::floating:
        out += float_repr(v.f);
        return;
      case VT::string:
        if (repr)
          repr_str(v.sv, out);
        else
          out.append(v.sv);
        return;
      case VT::list: {
        if (v.lt == LT::generator || v.lt == LT::range || v.lt == LT::view)
          gap_at(line, std::string("printing a ") + type_name(v) +
                           " is not supported");
        bool tuple = v.lt == LT::tuple;
        out += tuple ? '(' : '[';
        size_t n = list_size(v);
        for (size_t k = 0; k < n; ++k) {
          if (k) out += ", ";
          to_str(list_at(v, k), out, line, true, depth + 1);
          check_size(out.size(), line);
        }
        if (tuple && n == 1) out += ',';
        out += tuple ? ')' : ']';
        return;
      }
      case VT::dict:
      case VT::ns: {
        if (v.t == VT::ns) out += "<Namespace ";
        out += '{';
        bool first = true;
        dict_each(v, [&](std::string_view k, const Value& val) {
          if (!first) out += ", ";
          first = false;
          repr_str(k, out);
          out += ": ";
          to_str(val, out, line, true, depth + 1);
          check_size(out.size(), line);
        });
        out += '}';
        if (v.t == VT::ns) out += '>';
        return;
      }
      default:
        gap_at(line,
               std::string("printing a ") + type_name(v) + " is not supported");
    }
  }
  std::string str(const Value& v, int line) {
    if (v.t == VT::string) return std::string(v.sv);
    std::string s;
    to_str(v, s, line);
    return s;
  }
  // str(v) as a value, without copying a string.
  Value str_value(const Value& v, int line) {
    if (v.t == VT::string) return v;
    return v_str(str(v, line));
  }

  // ------------------------------------------------------------ json

  void json_str(std::string_view s, std::string& out, bool ascii) {
    out += '"';
    for (size_t i = 0; i < s.size();) {
      size_t b = i;
      uint32_t c = next_cp(s, i);
      char buf[16];
      switch (c) {
        case '"':
          out += "\\\"";
          break;
        case '\\':
          out += "\\\\";
          break;
        case '\n':
          out += "\\n";
          break;
        case '\r':
          out += "\\r";
          break;
        case '\t':
          out += "\\t";
          break;
        case '\b':
          out += "\\b";
          break;
        case '\f':
          out += "\\f";
          break;
        default:
          if (c < 0x20) {
            std::snprintf(buf, sizeof buf, "\\u%04x", c);
            out += buf;
          } else if (ascii && c > 0x7e) {
            if (c >= 0x10000) {
              uint32_t u = c - 0x10000;
              std::snprintf(buf, sizeof buf, "\\u%04x\\u%04x",
                            0xd800 + (u >> 10), 0xdc00 + (u & 0x3ff));
            } else {
              std::snprintf(buf, sizeof buf, "\\u%04x", c);
            }
            out += buf;
          } else {
            out.append(s.substr(b, i - b));
          }
      }
    }
    out += '"';
  }

  struct JsonFmt {
    std::optional<std::string> indent;
    std::string item_sep = ", ", key_sep = ": ";
    bool sort_keys = false, ascii = false;
  };

  void to_json(const Value& v, std::string& out, const JsonFmt& f, int level,
               int line) {
    if (level > 512) bound_at(line, "tojson: value nested too deeply");
    check_size(out.size(), line);
    auto newline = [&](int lv) {
      if (!f.indent) return;
      out += '\n';
      for (int k = 0; k < lv; ++k)
        out += *f.indent;
    };
    switch (v.t) {
      case VT::none:
        out += "null";
        return;
      case VT::boolean:
        out += v.b ? "true" : "false";
        return;
      case VT::integer:
        out += std::to_string(v.i);
        return;
      case VT::floating:
        if (std::isnan(v.f))
          out += "NaN";
        else if (std::isinf(v.f))
          out += v.f < 0 ? "-Infinity" : "Infinity";
        else
          out += float_repr(v.f);
        return;
      case VT::string:
        json_str(v.sv, out, f.ascii);
        return;
      case VT::list: {
        if (v.lt != LT::list && v.lt != LT::tuple)
          fail_at(line, std::string("tojson: Object of type ") + type_name(v) +
                            " is not JSON serializable");
        size_t n = list_size(v);
        if (n == 0) {
          out += "[]";
          return;
        }
        out += '[';
        for (size_t k = 0; k < n; ++k) {
          if (k) out += f.item_sep;
          newline(level + 1);
          to_json(list_at(v, k), out, f, level + 1, line);
        }
        newline(level);
        out += ']';
        return;
      }
      case VT::dict: {
        if (dict_size(v) == 0) {
          out += "{}";
          return;
        }
        std::vector<std::pair<std::string_view, Value>> items;
        dict_each(v, [&](std::string_view k, const Value& val) {
          items.emplace_back(k, val);
        });
        if (f.sort_keys)
          std::stable_sort(items.begin(), items.end(),
                           [](auto& a, auto& b) { return a.first < b.first; });
        out += '{';
        bool first = true;
        for (auto& [k, val] : items) {
          if (!first) out += f.item_sep;
          first = false;
          newline(level + 1);
          json_str(k, out, f.ascii);
          out += f.key_sep;
          to_json(val, out, f, level + 1, line);
        }
        newline(level);
        out += '}';
        return;
      }
      default:
        fail_at(line, std::string("tojson: Object of type ") + type_name(v) +
                          " is not JSON serializable");
    }
  }

  // ------------------------------------------------------------ semantics

  bool truthy(const Value& v) {
    switch (v.t) {
      case VT::undefined:
      case VT::none:
        return false;
      case VT::boolean:
        return v.b;
      case VT::integer:
        return v.i != 0;
      case VT::floating:
        return v.f != 0;
      case VT::string:
        return !v.sv.empty();
      case VT::list:
        return v.lt == LT::generator || list_size(v) > 0;
      case VT::dict:
        return dict_size(v) > 0;
      default:
        return true;
    }
  }

  static bool numeric(const Value& v) {
    return v.t == VT::boolean || v.t == VT::integer || v.t == VT::floating;
  }
  static double num(const Value& v) {
    return v.t == VT::floating  ? v.f
           : v.t == VT::integer ? static_cast<double>(v.i)
                                : (v.b ? 1.0 : 0.0);
  }
  static int64_t inum(const Value& v) {
    return v.t == VT::integer ? v.i : (v.b ? 1 : 0);
  }

  bool equal(const Value& a, const Value& b, int line, int depth = 0) {
    if (depth > 512) bound_at(line, "comparison nested too deeply");
    if (numeric(a) && numeric(b)) {
      if (a.t != VT::floating && b.t != VT::floating) return inum(a) == inum(b);
      return num(a) == num(b);
    }
    if (a.t != b.t) return false;
    switch (a.t) {
      case VT::undefined:
      case VT::none:
        return true;
      case VT::string:
        return a.sv == b.sv;
      case VT::list: {
        if (a.lt != b.lt) return false;
        if (a.j && a.j == b.j) return true;
        if (a.lt == LT::generator || a.lt == LT::view)
          return a.list == b.list && a.j == b.j;
        size_t n = list_size(a);
        if (n != list_size(b)) return false;
        for (size_t k = 0; k < n; ++k)
          if (!equal(list_at(a, k), list_at(b, k), line, depth + 1))
            return false;
        return true;
      }
      case VT::dict: {
        if (a.j && a.j == b.j) return true;
        if (dict_size(a) != dict_size(b)) return false;
        bool same = true;
        dict_each(a, [&](std::string_view k, const Value& va) {
          if (!same) return;
          auto vb = dict_get(b, k);
          same = vb && equal(va, *vb, line, depth + 1);
        });
        return same;
      }
      default:
        return a.dict == b.dict && a.fn == b.fn;
    }
  }

  // a < b (Python), or a TypeError.
  bool less(const Value& a, const Value& b, int line) {
    if (a.t == VT::undefined) undefined_error(a, line);
    if (b.t == VT::undefined) undefined_error(b, line);
    if (numeric(a) && numeric(b)) {
      if (a.t != VT::floating && b.t != VT::floating) return inum(a) < inum(b);
      return num(a) < num(b);
    }
    if (a.t == VT::string && b.t == VT::string) return a.sv < b.sv;
    if (a.t == VT::list && b.t == VT::list && a.lt == b.lt &&
        (a.lt == LT::list || a.lt == LT::tuple)) {
      size_t n = list_size(a), m = list_size(b);
      for (size_t k = 0; k < std::min(n, m); ++k) {
        Value x = list_at(a, k), y = list_at(b, k);
        if (!equal(x, y, line)) return less(x, y, line);
      }
      return n < m;
    }
    fail_at(line, std::string("'<' not supported between instances of '") +
                      type_name(a) + "' and '" + type_name(b) + "'");
  }

  bool compare(const std::string& op, const Value& a, const Value& b,
               int line) {
    if (op == "==") return equal(a, b, line);
    if (op == "!=") return !equal(a, b, line);
    if (op == "<") return less(a, b, line);
    if (op == ">") return less(b, a, line);
    if (op == "<=") return less(a, b, line) || equal(a, b, line);
    if (op == ">=") return less(b, a, line) || equal(a, b, line);
    if (op == "in") return contains(b, a, line);
    if (op == "not in") return !contains(b, a, line);
    gap_at(line, "unknown comparison " + op);
  }

  // item in container (Python).
  bool contains(const Value& c, const Value& item, int line) {
    switch (c.t) {
      case VT::undefined:
        return false;
      case VT::string:
        if (item.t != VT::string)
          fail_at(line,
                  std::string(
                      "'in <string>' requires string as left operand, not ") +
                      type_name(item));
        return c.sv.find(item.sv) != std::string_view::npos;
      case VT::list: {
        for (const Value& x : items(c, line))
          if (equal(x, item, line)) return true;
        return false;
      }
      case VT::dict:
        if (item.t == VT::list || item.t == VT::dict)
          fail_at(line,
                  std::string("unhashable type: '") + type_name(item) + "'");
        return item.t == VT::string && dict_get(c, item.sv).has_value();
      default:
        fail_at(line, std::string("argument of type '") + type_name(c) +
                          "' is not iterable");
    }
  }

  // Python's iter(v) as a list.
  ValueList items(const Value& v, int line) {
    ValueList out;
    switch (v.t) {
      case VT::undefined:
        return out;
      case VT::string:
        for (auto cp : code_points(v.sv))
          out.push_back(v_sub(v, cp));
        return out;
      case VT::list: {
        if (v.lt == LT::generator) {
          if (*v.used)
            gap_at(line,
                   "a filter's result (a one-shot generator) used twice is "
                   "not supported");
          *v.used = true;
        }
        size_t n = list_size(v);
        out.reserve(n);
        for (size_t k = 0; k < n; ++k)
          out.push_back(list_at(v, k));
        return out;
      }
      case VT::dict: {
        // the context's keys outlive the render; an owned dict's are copied
        if (v.j) {
          for (auto it = v.j->begin(); it != v.j->end(); ++it)
            out.push_back(v_borrow(it.key()));
        } else {
          for (auto& kv : *v.dict)
            out.push_back(v_str(kv.first));
        }
        return out;
      }
      default:
        fail_at(line,
                std::string("'") + type_name(v) + "' object is not iterable");
    }
  }

  size_t length(const Value& v, int line) {
    switch (v.t) {
      case VT::undefined:
        return 0;
      case VT::string:
        return cp_count(v.sv);
      case VT::list:
        if (v.lt == LT::generator)
          fail_at(line, "object of type 'generator' has no len()");
        return list_size(v);
      case VT::dict:
        return dict_size(v);
      default:
        fail_at(line, std::string("object of type '") + type_name(v) +
                          "' has no len()");
    }
  }

  Value dict_items(const Value& d) {
    ValueList out;
    dict_each(d, [&](std::string_view k, const Value& val) {
      out.push_back(v_list({v_str(std::string(k)), val}, LT::tuple));
    });
    return v_list(std::move(out), LT::view);
  }

  // obj.name (Jinja's sandboxed getattr).
  Value getattr(const Value& obj, const std::string& name, int line) {
    static const std::set<std::string, std::less<>> dict_unsupported = {
        "copy", "fromkeys", "clear", "pop", "popitem", "setdefault", "update"};
    static const std::set<std::string, std::less<>> list_methods = {
        "append", "clear", "copy",   "count",   "extend", "index",
        "insert", "pop",   "remove", "reverse", "sort"};
    static const std::set<std::string, std::less<>> str_methods = {
        "capitalize",   "casefold",     "center",       "count",
        "encode",       "endswith",     "expandtabs",   "find",
        "format",       "format_map",   "index",        "isalnum",
        "isalpha",      "isascii",      "isdecimal",    "isdigit",
        "isidentifier", "islower",      "isnumeric",    "isprintable",
        "isspace",      "istitle",      "isupper",      "join",
        "ljust",        "lower",        "lstrip",       "maketrans",
        "partition",    "removeprefix", "removesuffix", "replace",
        "rfind",        "rindex",       "rjust",        "rpartition",
        "rsplit",       "rstrip",       "split",        "splitlines",
        "startswith",   "strip",        "swapcase",     "title",
        "translate",    "upper",        "zfill"};
    if (!name.empty() && name[0] == '_')
      fail_at(line, "access to attribute '" + name + "' is unsafe");
    switch (obj.t) {
      case VT::undefined:
        undefined_error(obj, line);
      case VT::dict:
        if (name == "items" || name == "keys" || name == "values" ||
            name == "get")
          return bound_method(obj, name);
        if (dict_unsupported.count(name))
          gap_at(line, "the dict method '" + name + "' is not supported");
        if (auto v = dict_get(obj, name)) return *v;
        return v_undef("'dict object' has no attribute '" + name + "'");
      case VT::ns:
        if (auto v = dict_get(obj, name)) return *v;
        return v_undef("'Namespace' object has no attribute '" + name + "'");
      case VT::loop:
        if (auto v = dict_get(obj, name)) return *v;
        if (name == "cycle" || name == "changed" || name == "depth" ||
            name == "depth0")
          gap_at(line, "loop." + name + " is not supported");
        return v_undef("'LoopContext' object has no attribute '" + name + "'");
      case VT::string:
        if (str_methods.count(name)) {
          if (kMethods.count(name) && name != "items" && name != "keys" &&
              name != "values" && name != "get")
            return bound_method(obj, name);
          gap_at(line, "the str method '" + name + "' is not supported");
        }
        return v_undef("'str object' has no attribute '" + name + "'");
      case VT::list:
        if (list_methods.count(name))
          gap_at(line, "the list method '" + name + "' is not supported");
        return v_undef(std::string("'") + type_name(obj) +
                       " object' has no attribute '" + name + "'");
      default:
        return v_undef(std::string("'") + type_name(obj) +
                       " object' has no attribute '" + name + "'");
    }
  }

  // obj[key] (Jinja's sandboxed getitem).
  Value getitem(const Value& obj, const Value& key, int line) {
    switch (obj.t) {
      case VT::undefined:
        undefined_error(obj, line);
      case VT::dict:
        if (key.t == VT::string) {
          if (auto v = dict_get(obj, key.sv)) return *v;
          return getattr(obj, std::string(key.sv), line);
        }
        if (key.t == VT::list || key.t == VT::dict)
          fail_at(line,
                  std::string("unhashable type: '") + type_name(key) + "'");
        return v_undef("'dict object' has no element " + str(key, line));
      case VT::ns:
      case VT::loop:
        if (key.t == VT::string) return getattr(obj, std::string(key.sv), line);
        return v_undef("no element");
      case VT::list:
      case VT::string: {
        if (key.t == VT::string) return getattr(obj, std::string(key.sv), line);
        if (key.t != VT::integer && key.t != VT::boolean)
          return v_undef(std::string("'") + type_name(obj) +
                         " object' has no element " + str(key, line));
        if (obj.t == VT::list &&
            (obj.lt == LT::generator || obj.lt == LT::view))
          return v_undef(std::string("'") + type_name(obj) +
                         "' object is not subscriptable");
        int64_t idx = inum(key);
        if (obj.t == VT::list) {
          auto n = static_cast<int64_t>(list_size(obj));
          if (idx < 0) idx += n;
          if (idx < 0 || idx >= n)
            return v_undef("'list object' has no element " +
                           std::to_string(inum(key)));
          return list_at(obj, static_cast<size_t>(idx));
        }
        auto cps = code_points(obj.sv);
        auto n = static_cast<int64_t>(cps.size());
        if (idx < 0) idx += n;
        if (idx < 0 || idx >= n)
          return v_undef("'str object' has no element " +
                         std::to_string(inum(key)));
        return v_sub(obj, cps[static_cast<size_t>(idx)]);
      }
      default:
        return v_undef(std::string("'") + type_name(obj) +
                       " object' has no element " + str(key, line));
    }
  }

  Value slice(const Value& obj, const Value* start, const Value* stop,
              const Value* stepv, int line) {
    if (obj.t == VT::undefined) undefined_error(obj, line);
    auto bound = [&](const Value* v,
                     const char* what) -> std::optional<int64_t> {
      if (!v || v->t == VT::none) return std::nullopt;
      if (v->t != VT::integer && v->t != VT::boolean)
        fail_at(line, std::string("slice ") + what + " must be an integer");
      return inum(*v);
    };
    auto b = bound(start, "start"), e = bound(stop, "stop"),
         s = bound(stepv, "step");
    int64_t st = s.value_or(1);
    if (st == 0) fail_at(line, "slice step cannot be zero");
    bool is_str = obj.t == VT::string;
    if (!is_str &&
        !(obj.t == VT::list &&
          (obj.lt == LT::list || obj.lt == LT::tuple || obj.lt == LT::range)))
      return v_undef(std::string("'") + type_name(obj) +
                     "' object is not subscriptable");
    std::vector<std::string_view> cps;
    if (is_str) cps = code_points(obj.sv);
    auto n = static_cast<int64_t>(is_str ? cps.size() : list_size(obj));
    auto clamp = [&](std::optional<int64_t> v, int64_t dflt) {
      if (!v) return dflt;
      int64_t x = *v < 0 ? *v + n : *v;
      if (st > 0) return std::clamp<int64_t>(x, 0, n);
      return std::clamp<int64_t>(x, -1, n - 1);
    };
    int64_t from = clamp(b, st > 0 ? 0 : n - 1);
    int64_t to = clamp(e, st > 0 ? n : -1);
    if (is_str) {
      std::string out;
      for (int64_t k = from; st > 0 ? k < to : k > to; k += st)
        out.append(cps[static_cast<size_t>(k)]);
      return v_str(std::move(out));
    }
    ValueList out;
    for (int64_t k = from; st > 0 ? k < to : k > to; k += st)
      out.push_back(list_at(obj, static_cast<size_t>(k)));
    return v_list(std::move(out), obj.lt == LT::tuple ? LT::tuple : LT::list);
  }

  Value call_value(const Value& f, Args& args, int line) {
    if (f.t == VT::undefined) undefined_error(f, line);
    if (f.t != VT::func)
      fail_at(line,
              std::string("'") + type_name(f) + "' object is not callable");
    if (++call_depth > 32) bound_at(line, "calls nested deeper than 32 levels");
    args.line = line;
    if (args.what.empty()) args.what = f.fn->name + "()";
    Value r = f.fn->call(*this, args);
    --call_depth;
    return r;
  }

  // ------------------------------------------------------------ strings

  static std::string ascii_case(std::string_view s, int line, const char* what,
                                int mode) {  // 0 lower, 1 upper
    if (!is_ascii(s))
      gap_at(line, std::string(what) + " of non-ASCII text is not supported");
    std::string out(s);
    for (char& c : out)
      c = static_cast<char>(mode ? std::toupper(static_cast<unsigned char>(c))
                                 : std::tolower(static_cast<unsigned char>(c)));
    return out;
  }
  // Python's str.title().
  static std::string py_title(std::string_view s, int line) {
    std::string out = ascii_case(s, line, "title", 0);
    bool prev_cased = false;
    for (char& c : out) {
      bool letter = std::isalpha(static_cast<unsigned char>(c)) != 0;
      if (letter && !prev_cased)
        c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
      prev_cased = letter;
    }
    return out;
  }
  static std::string py_capitalize(std::string_view s, int line) {
    std::string out = ascii_case(s, line, "capitalize", 0);
    if (!out.empty())
      out[0] =
          static_cast<char>(std::toupper(static_cast<unsigned char>(out[0])));
    return out;
  }

  Value py_replace(const Value& s, std::string_view from, std::string_view to,
                   int64_t count, int line) {
    std::string out;
    std::string_view src = s.sv;
    if (from.empty()) {
      // Python inserts `to` around every code point.
      auto cps = code_points(src);
      int64_t done = 0;
      for (auto cp : cps) {
        if (count < 0 || done < count) {
          out.append(to);
          ++done;
        }
        out.append(cp);
        check_size(out.size(), line);
      }
      if (count < 0 || done < count) out.append(to);
      return v_str(std::move(out));
    }
    size_t p = 0;
    int64_t done = 0;
    while (count < 0 || done < count) {
      size_t q = src.find(from, p);
      if (q == std::string_view::npos) break;
      out.append(src.substr(p, q - p));
      out.append(to);
      check_size(out.size(), line);
      p = q + from.size();
      ++done;
    }
    out.append(src.substr(p));
    return v_str(std::move(out));
  }

  Value py_split(const Value& s, const std::optional<Value>& sep,
                 int64_t maxsplit, int line) {
    ValueList out;
    std::string_view src = s.sv;
    if (!sep || sep->t == VT::none) {
      size_t i = 0;
      auto skip_ws = [&]() {
        while (i < src.size()) {
          size_t k = i;
          if (!py_space(next_cp(src, k))) break;
          i = k;
        }
      };
      skip_ws();
      while (i < src.size()) {
        if (maxsplit >= 0 && static_cast<int64_t>(out.size()) >= maxsplit) {
          // the rest, as it is
          out.push_back(v_sub(s, src.substr(i)));
          return v_list(std::move(out));
        }
        size_t b = i;
        while (i < src.size()) {
          size_t k = i;
          if (py_space(next_cp(src, k))) break;
          i = k;
        }
        out.push_back(v_sub(s, src.substr(b, i - b)));
        skip_ws();
      }
      return v_list(std::move(out));
    }
    if (sep->t != VT::string)
      fail_at(line, "split(): the separator must be a string or None");
    if (sep->sv.empty()) fail_at(line, "split(): empty separator");
    size_t p = 0;
    while (maxsplit < 0 || static_cast<int64_t>(out.size()) < maxsplit) {
      size_t q = src.find(sep->sv, p);
      if (q == std::string_view::npos) break;
      out.push_back(v_sub(s, src.substr(p, q - p)));
      p = q + sep->sv.size();
    }
    out.push_back(v_sub(s, src.substr(p)));
    return v_list(std::move(out));
  }

  Value bound_method(const Value& self, const std::string& name) {
    return v_func(name, [self, name](Renderer& r, Args& a) {
      return r.method(self, name, a);
    });
  }

  std::string_view need_str(const std::optional<Value>& v, int line,
                            const std::string& what) {
    if (!v || v->t != VT::string) fail_at(line, what + " must be a string");
    return v->sv;
  }

  Value method(const Value& self, const std::string& name, Args& a) {
    int line = a.line;
    a.what = name + "()";
    if (self.t == VT::dict) {
      if (name == "items") {
        a.allow({});
        return dict_items(self);
      }
      if (name == "keys") {
        a.allow({});
        return v_list(items(self, line), LT::view);
      }
      if (name == "values") {
        a.allow({});
        ValueList out;
        dict_each(self,
                  [&](std::string_view, const Value& v) { out.push_back(v); });
        return v_list(std::move(out), LT::view);
      }
      if (name == "get") {
        a.allow({"key", "default"});
        auto key = a.get(0, "key");
        if (!key) fail_at(line, "get() takes a key");
        if (key->t == VT::string)
          if (auto v = dict_get(self, key->sv)) return *v;
        auto d = a.get(1, "default");
        return d ? *d : v_none();
      }
    }
    if (self.t != VT::string)
      gap_at(line, "method '" + name + "' of a " + type_name(self) +
                       " is not supported");
    if (name == "startswith" || name == "endswith") {
      a.allow({"prefix"});
      auto arg = a.get(0, "prefix");
      if (!arg) fail_at(line, name + "() takes one argument");
      std::vector<std::string_view> opts;
      if (arg->t == VT::string) {
        opts.push_back(arg->sv);
      } else if (arg->t == VT::list && arg->lt == LT::tuple) {
        for (auto& x : items(*arg, line)) {
          if (x.t != VT::string)
            fail_at(line, name + "(): tuple items must be strings");
          opts.push_back(x.sv);
        }
      } else {
        fail_at(line, name + "() argument must be str or a tuple of str");
      }
      for (auto o : opts) {
        std::string_view s = self.sv;
        bool hit = o.size() <= s.size() &&
                   (name == "startswith" ? s.substr(0, o.size()) == o
                                         : s.substr(s.size() - o.size()) == o);
        if (hit) return v_bool(true);
      }
      return v_bool(false);
    }
    if (name == "strip" || name == "lstrip" || name == "rstrip") {
      a.allow({"chars"});
      auto chars = a.get(0, "chars");
      std::string_view cs;
      const std::string_view* cp = nullptr;
      if (chars && chars->t != VT::none) {
        cs = need_str(chars, line, name + "() argument");
        cp = &cs;
      }
      return v_sub(self,
                   py_strip(self.sv, name != "rstrip", name != "lstrip", cp));
    }
    if (name == "split") {
      a.allow({"sep", "maxsplit"});
      auto ms = a.get(1, "maxsplit");
      if (ms && ms->t != VT::integer)
        fail_at(line, "split(): maxsplit must be an integer");
      return py_split(self, a.get(0, "sep"), ms ? ms->i : -1, line);
    }
    if (name == "upper" || name == "lower") {
      a.allow({});
      return v_str(ascii_case(self.sv, line, name.c_str(), name == "upper"));
    }
    if (name == "title") {
      a.allow({});
      return v_str(py_title(self.sv, line));
    }
    if (name == "capitalize") {
      a.allow({});
      return v_str(py_capitalize(self.sv, line));
    }
    if (name == "replace") {
      a.allow({"old", "new", "count"});
      auto o = need_str(a.get(0, "old"), line, "replace() old");
      auto n = need_str(a.get(1, "new"), line, "replace() new");
      auto c = a.get(2, "count");
      if (c && c->t != VT::integer)
        fail_at(line, "replace(): count must be an integer");
      return py_replace(self, o, n, c ? c->i : -1, line);
    }
    gap_at(line, "method '" + name + "' is not supported");
  }

  // ------------------------------------------------------------ builtins

  void install_builtins() {
    builtins.set("range", v_func("range", [](Renderer& r, Args& a) {
                   a.allow({"start", "stop", "step"});
                   for (auto& v : a.pos)
                     if (v.t != VT::integer && v.t != VT::boolean)
                       fail_at(a.line, "range() arguments must be integers");
                   int64_t b = 0, e = 0, s = 1;
                   if (a.pos.size() == 1) {
                     e = inum(a.pos[0]);
                   } else if (a.pos.size() >= 2) {
                     b = inum(a.pos[0]);
                     e = inum(a.pos[1]);
                     if (a.pos.size() == 3) s = inum(a.pos[2]);
                   } else {
                     fail_at(a.line, "range() takes 1 to 3 arguments");
                   }
                   if (s == 0)
                     fail_at(a.line, "range() arg 3 must not be zero");
                   ValueList out;
                   for (int64_t k = b; s > 0 ? k < e : k > e; k += s) {
                     if (out.size() >= 1'000'000)
                       bound_at(
                           a.line,
                           "range() of more than 1000000 items is refused");
                     out.push_back(v_int(k));
                   }
                   (void)r;
                   return v_list(std::move(out), LT::range);
                 }));
    builtins.set(
        "namespace", v_func("namespace", [](Renderer& r, Args& a) {
          ValueDict d;
          if (a.pos.size() > 1)
            fail_at(a.line,
                    "namespace() takes at most one positional argument");
          if (a.pos.size() == 1) {
            if (a.pos[0].t != VT::dict)
              fail_at(a.line, "namespace() argument must be a dict");
            dict_each(a.pos[0], [&](std::string_view k, const Value& v) {
              d.emplace_back(std::string(k), v);
            });
          }
          for (auto& [k, v] : a.kw) {
            bool found = false;
            for (auto& [dk, dv] : d)
              if (dk == k) dv = v, found = true;
            if (!found) d.emplace_back(k, v);
          }
          (void)r;
          return v_dict(std::move(d), VT::ns);
        }));
    builtins.set("dict", v_func("dict", [](Renderer& r, Args& a) {
                   ValueDict d;
                   if (!a.pos.empty())
                     gap_at(
                         a.line,
                         "dict() with positional arguments is not supported");
                   for (auto& [k, v] : a.kw)
                     d.emplace_back(k, v);
                   (void)r;
                   return v_dict(std::move(d));
                 }));
    builtins.set("raise_exception",
                 v_func("raise_exception", [](Renderer& r, Args& a) -> Value {
                   a.allow({"message"});
                   auto m = a.get(0, "message");
                   fail_at(a.line, "raise_exception: " +
                                       (m ? r.str(*m, a.line) : std::string()));
                 }));
    builtins.set(
        "strftime_now", v_func("strftime_now", [](Renderer& r, Args& a) {
          a.allow({"format"});
          auto f =
              r.need_str(a.get(0, "format"), a.line, "strftime_now() format");
          for (size_t k = 0; k + 1 < f.size(); ++k) {
            if (f[k] != '%') continue;
            char c = f[k + 1];
            if (c == 'f' || c == 'z' || c == 'Z' || c == ':' || c == 'E' ||
                c == 'O')
              gap_at(a.line, std::string("strftime_now(): %") + c +
                                 " is not supported");
            ++k;
          }
          auto now = r.opt.now.value_or(std::chrono::system_clock::now());
          std::time_t t = std::chrono::system_clock::to_time_t(now);
          std::tm tm{};
          localtime_r(&t, &tm);
          std::string fmt(f);
          std::string out(fmt.size() * 8 + 64, '\0');
          size_t n = fmt.empty() ? 0
                                 : std::strftime(out.data(), out.size(),
                                                 fmt.c_str(), &tm);
          if (n == 0 && !fmt.empty())
            gap_at(a.line,
                   "strftime_now(): the formatted date is empty or too long");
          out.resize(n);
          return v_str(std::move(out));
        }));
  }

  // ------------------------------------------------------------ tests

  bool test(const std::string& name, const Value& v,
            const std::vector<Value>& args, int line) {
    auto arg = [&]() -> const Value& { return args.at(0); };
    if (name == "defined") return v.t != VT::undefined;
    if (name == "undefined") return v.t == VT::undefined;
    if (name == "none") return v.t == VT::none;
    if (name == "boolean") return v.t == VT::boolean;
    if (name == "false") return v.t == VT::boolean && !v.b;
    if (name == "true") return v.t == VT::boolean && v.b;
    if (name == "integer") return v.t == VT::integer;
    if (name == "float") return v.t == VT::floating;
    if (name == "number") return numeric(v);
    if (name == "string") return v.t == VT::string;
    if (name == "mapping") return v.t == VT::dict;
    if (name == "iterable")
      return v.t == VT::undefined || v.t == VT::string || v.t == VT::list ||
             v.t == VT::dict;
    if (name == "sequence")
      return v.t == VT::undefined || v.t == VT::string ||
             (v.t == VT::list && v.lt != LT::generator && v.lt != LT::view) ||
             v.t == VT::dict;
    if (name == "callable") return v.t == VT::func;
    if (name == "sameas") {
      const Value& o = arg();
      if (v.t == VT::none || v.t == VT::boolean || o.t == VT::none ||
          o.t == VT::boolean)
        return v.t == o.t && (v.t == VT::none || v.b == o.b);
      gap_at(line,
             "'sameas' on values other than None, True and False is not "
             "supported");
    }
    if (name == "in") return contains(arg(), v, line);
    if (name == "eq" || name == "equalto" || name == "==")
      return equal(v, arg(), line);
    if (name == "ne" || name == "!=") return !equal(v, arg(), line);
    if (name == "lt" || name == "lessthan" || name == "<")
      return less(v, arg(), line);
    if (name == "gt" || name == "greaterthan" || name == ">")
      return less(arg(), v, line);
    if (name == "le" || name == "<=") return compare("<=", v, arg(), line);
    if (name == "ge" || name == ">=") return compare(">=", v, arg(), line);
    if (name == "odd" || name == "even" || name == "divisibleby") {
      if (v.t != VT::integer && v.t != VT::boolean)
        fail_at(line, "test '" + name + "' needs an integer");
      int64_t x = inum(v);
      if (name == "odd") return x % 2 != 0;
      if (name == "even") return x % 2 == 0;
      const Value& d = arg();
      if (d.t != VT::integer || d.i == 0)
        fail_at(line, "divisibleby needs a non-zero integer");
      return x % d.i == 0;
    }
    if (name == "lower" || name == "upper") {
      std::string s = str(v, line);
      if (!is_ascii(s))
        gap_at(line, "test '" + name + "' on non-ASCII text is not supported");
      bool cased = false;
      for (char c : s) {
        if (std::islower(static_cast<unsigned char>(c))) {
          cased = true;
          if (name == "upper") return false;
        } else if (std::isupper(static_cast<unsigned char>(c))) {
          cased = true;
          if (name == "lower") return false;
        }
      }
      return cased;
    }
    gap_at(line, "test '" + name + "' is not supported");
  }

  // ------------------------------------------------------------ filters

  // Jinja's make_attrgetter: "a.b.0" looked up with getitem part by part.
  Value attr_path(const Value& item, std::string_view path, int line,
                  const std::optional<Value>& dflt = std::nullopt) {
    Value v = item;
    size_t p = 0;
    while (true) {
      size_t q = path.find('.', p);
      std::string_view part = path.substr(
          p, q == std::string_view::npos ? std::string_view::npos : q - p);
      bool all_digits =
          !part.empty() && std::all_of(part.begin(), part.end(), digit);
      Value key =
          all_digits
              ? v_int(std::strtoll(std::string(part).c_str(), nullptr, 10))
              : v_str(std::string(part));
      v = getitem(v, key, line);
      if (dflt && v.t == VT::undefined) v = *dflt;
      if (q == std::string_view::npos) break;
      p = q + 1;
    }
    return v;
  }

  Value apply_filter(const std::string& name, const Value& v, Args& a) {
    int line = a.line;
    a.what = "filter '" + name + "'";
    if (name == "trim") {
      a.allow({"chars"});
      Value s = str_value(v, line);
      auto chars = a.get(0, "chars");
      std::string_view cs;
      const std::string_view* cp = nullptr;
      if (chars && chars->t != VT::none) {
        cs = need_str(chars, line, "trim chars");
        cp = &cs;
      }
      return v_sub(s, py_strip(s.sv, true, true, cp));
    }
    if (name == "tojson") {
      // transformers' tojson: json.dumps(x, ensure_ascii=False, indent=None,
      // separators=None, sort_keys=False), no HTML escaping.
      a.allow({"ensure_ascii", "indent", "separators", "sort_keys"});
      JsonFmt f;
      if (auto e = a.get(0, "ensure_ascii")) f.ascii = truthy(*e);
      if (auto in = a.get(1, "indent"); in && in->t != VT::none) {
        if (in->t == VT::integer)
          f.indent = std::string(static_cast<size_t>(std::max<int64_t>(
                                     0, std::min<int64_t>(in->i, 1000))),
                                 ' ');
        else if (in->t == VT::string)
          f.indent = std::string(in->sv);
        else
          fail_at(line, "tojson: indent must be an integer or a string");
        f.item_sep = ",";
      }
      if (auto s = a.get(2, "separators"); s && s->t != VT::none) {
        if (s->t != VT::list || list_size(*s) != 2 ||
            list_at(*s, 0).t != VT::string || list_at(*s, 1).t != VT::string)
          fail_at(line, "tojson: separators must be two strings");
        f.item_sep = std::string(list_at(*s, 0).sv);
        f.key_sep = std::string(list_at(*s, 1).sv);
      }
      if (auto s = a.get(3, "sort_keys")) f.sort_keys = truthy(*s);
      std::string out;
      to_json(v, out, f, 0, line);
      return v_str(std::move(out));
    }
    if (name == "length" || name == "count") {
      a.allow({});
      return v_int(static_cast<int64_t>(length(v, line)));
    }
    if (name == "upper" || name == "lower") {
      a.allow({});
      return v_str(
          ascii_case(str(v, line), line, name.c_str(), name == "upper"));
    }
    if (name == "capitalize") {
      a.allow({});
      return v_str(py_capitalize(str(v, line), line));
    }
    if (name == "title") {
      // Jinja's do_title: capitalises after -, whitespace, ( { [ <.
      a.allow({});
      std::string s = ascii_case(str(v, line), line, "title", 0);
      bool start = true;
      for (char& c : s) {
        if (start)
          c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
        start = c == '-' || c == '(' || c == '{' || c == '[' || c == '<' ||
                c == ' ' || (c >= 9 && c <= 13) || (c >= 0x1c && c <= 0x1f);
      }
      return v_str(std::move(s));
    }
    if (name == "default" || name == "d") {
      a.allow({"default_value", "boolean"});
      auto dv = a.get(0, "default_value");
      auto b = a.get(1, "boolean");
      bool use = v.t == VT::undefined || (b && truthy(*b) && !truthy(v));
      if (use) return dv ? *dv : v_borrow("");
      return v;
    }
    if (name == "join") {
      a.allow({"d", "attribute"});
      auto sep = a.get(0, "d");
      std::string sp = sep ? str(*sep, line) : std::string();
      auto attr = a.get(1, "attribute");
      std::string out;
      bool first = true;
      for (Value& x : items(v, line)) {
        if (!first) out += sp;
        first = false;
        if (attr) x = attr_path(x, str(*attr, line), line);
        to_str(x, out, line);
        check_size(out.size(), line);
      }
      return v_str(std::move(out));
    }
    if (name == "first" || name == "last") {
      a.allow({});
      if (v.t == VT::undefined)
        return v_undef("No " + name + " item, sequence was empty.");
      if (name == "last" && v.t == VT::list && v.lt == LT::generator)
        fail_at(line,
                "filter 'last' of a generator: 'generator' object is not "
                "reversible");
      ValueList xs = items(v, line);
      if (xs.empty())
        return v_undef("No " + name + " item, sequence was empty.");
      return name == "first" ? xs.front() : xs.back();
    }
    if (name == "string") {
      a.allow({});
      return str_value(v, line);
    }
    if (name == "safe") {
      // Markup in a template without autoescape prints as its text, but
      // Markup + str escapes the str: only printing it is supported here.
      a.allow({});
      gap_at(line, "filter 'safe' is not supported");
    }
    if (name == "int") {
      a.allow({"default", "base"});
      auto dv = a.get(0, "default");
      auto bv = a.get(1, "base");
      int base = bv ? static_cast<int>(inum(*bv)) : 10;
      auto fallback = [&]() { return dv ? *dv : v_int(0); };
      if (v.t == VT::integer) return v;
      if (v.t == VT::boolean) return v_int(v.b);
      if (v.t == VT::floating) {
        if (!std::isfinite(v.f))
          fail_at(line, "int(): cannot convert an infinite or NaN float");
        return v_int(static_cast<int64_t>(v.f));
      }
      if (v.t == VT::string) {
        std::string s(py_strip(v.sv, true, true));
        std::string clean;
        // Python allows one underscore between digits ("1_000").
        for (size_t k = 0; k < s.size(); ++k) {
          bool joins = s[k] == '_' && k > 0 && k + 1 < s.size() &&
                       std::isalnum(static_cast<unsigned char>(s[k - 1])) &&
                       std::isalnum(static_cast<unsigned char>(s[k + 1]));
          if (!joins) clean += s[k];
        }
        if (!clean.empty() && is_ascii(clean)) {
          char* end = nullptr;
          errno = 0;
          long long x = std::strtoll(clean.c_str(), &end, base);
          if (!errno && end && *end == '\0' &&
              clean.find(' ') == std::string::npos)
            return v_int(x);
          double d = std::strtod(clean.c_str(), &end);
          if (end && *end == '\0' && std::isfinite(d) && base == 10 &&
              clean.find_first_of("xXpP") == std::string::npos)
            return v_int(static_cast<int64_t>(d));
        }
        return fallback();
      }
      return fallback();
    }
    if (name == "float") {
      a.allow({"default"});
      auto dv = a.get(0, "default");
      if (numeric(v)) return v_float(num(v));
      if (v.t == VT::string) {
        std::string s(py_strip(v.sv, true, true));
        char* end = nullptr;
        double d = std::strtod(s.c_str(), &end);
        if (!s.empty() && is_ascii(s) && end && *end == '\0' &&
            s.find_first_of("xXpP") == std::string::npos)
          return v_float(d);
      }
      return dv ? *dv : v_float(0.0);
    }
    if (name == "abs") {
      a.allow({});
      if (v.t == VT::integer) return v_int(v.i < 0 ? -v.i : v.i);
      if (v.t == VT::boolean) return v_int(v.b);
      if (v.t == VT::floating) return v_float(std::fabs(v.f));
      fail_at(line, std::string("bad operand type for abs(): '") +
                        type_name(v) + "'");
    }
    if (name == "items") {
      a.allow({});
      if (v.t == VT::undefined) return v_list({}, LT::generator);
      if (v.t != VT::dict)
        fail_at(line, "Can only get item pairs from a mapping.");
      Value r = dict_items(v);
      r.lt = LT::generator;
      r.used = std::make_shared<bool>(false);
      return r;
    }
    if (name == "list") {
      a.allow({});
      return v_list(items(v, line));
    }
    if (name == "reverse") {
      a.allow({});
      if (v.t == VT::string) {
        auto cps = code_points(v.sv);
        std::string out;
        for (size_t k = cps.size(); k-- > 0;)
          out.append(cps[k]);
        return v_str(std::move(out));
      }
      if (v.t == VT::list && v.lt == LT::generator) {
        ValueList xs = items(v, line);
        std::reverse(xs.begin(), xs.end());
        return v_list(std::move(xs));
      }
      if (v.t != VT::list)
        gap_at(line, "filter 'reverse' of a " + std::string(type_name(v)) +
                         " is not supported");
      ValueList xs = items(v, line);
      std::reverse(xs.begin(), xs.end());
      return v_list(std::move(xs), LT::generator);
    }
    if (name == "replace") {
      a.allow({"old", "new", "count"});
      Value s = str_value(v, line);
      std::string o = str(a.get(0, "old").value_or(v_borrow("")), line);
      std::string n = str(a.get(1, "new").value_or(v_borrow("")), line);
      auto c = a.get(2, "count");
      return py_replace(s, o, n, c && c->t == VT::integer ? c->i : -1, line);
    }
    if (name == "indent") {
      a.allow({"width", "first", "blank"});
      auto w = a.get(0, "width");
      std::string ind =
          !w ? std::string(4, ' ')
          : w->t == VT::string
              ? std::string(w->sv)
              : std::string(static_cast<size_t>(std::max<int64_t>(
                                0, std::min<int64_t>(inum(*w), 1000))),
                            ' ');
      auto fa = a.get(1, "first");
      auto ba = a.get(2, "blank");
      bool first = fa && truthy(*fa), blank = ba && truthy(*ba);
      std::string s = str(v, line) + "\n";
      std::vector<std::string> lines;
      std::string curl;
      for (size_t k = 0; k < s.size();) {
        size_t b = k;
        uint32_t c = next_cp(s, k);
        if (py_linebreak(c)) {
          if (c == '\r' && k < s.size() && s[k] == '\n') ++k;
          lines.push_back(curl);
          curl.clear();
        } else {
          curl.append(s, b, k - b);
        }
      }
      if (!curl.empty()) lines.push_back(curl);
      std::string rv;
      if (blank) {
        for (size_t k = 0; k < lines.size(); ++k) {
          if (k) rv += "\n" + ind;
          rv += lines[k];
        }
      } else if (!lines.empty()) {
        rv = lines[0];
        for (size_t k = 1; k < lines.size(); ++k)
          rv += "\n" + (lines[k].empty() ? lines[k] : ind + lines[k]);
      }
      if (first) rv = ind + rv;
      return v_str(std::move(rv));
    }
    if (name == "selectattr" || name == "rejectattr" || name == "select" ||
        name == "reject") {
      bool attr = name.size() > 6;
      bool keep_if = name[0] == 's';
      std::vector<Value> pos = a.pos;
      if (!a.kw.empty())
        gap_at(line,
               "filter '" + name + "' with keyword arguments is not supported");
      size_t at = 0;
      std::string path;
      if (attr) {
        if (pos.empty())
          fail_at(line, "filter '" + name + "' needs an attribute");
        path = str(pos[0], line);
        at = 1;
      }
      std::string tname;
      std::vector<Value> targs;
      if (pos.size() > at) {
        tname = str(pos[at], line);
        if (!kTests.count(tname))
          gap_at(line, "test '" + tname + "' is not supported");
        targs.assign(pos.begin() + static_cast<std::ptrdiff_t>(at + 1),
                     pos.end());
        if (kTestsWithArg.count(tname) != targs.size())
          fail_at(line, "test '" + tname + "' takes " +
                            (kTestsWithArg.count(tname) ? "one argument"
                                                        : "no argument"));
      }
      ValueList out;
      for (Value& x : items(v, line)) {
        Value probe = attr ? attr_path(x, path, line) : x;
        bool ok =
            tname.empty() ? truthy(probe) : test(tname, probe, targs, line);
        if (ok == keep_if) out.push_back(x);
      }
      return v_list(std::move(out), LT::generator);
    }
    if (name == "map") {
      ValueList out;
      std::optional<Value> attr, dflt;
      for (auto& [k, val] : a.kw) {
        if (k == "attribute")
          attr = val;
        else if (k == "default")
          dflt = val;
        else if (!a.pos.empty())
          fail_at(line, "filter 'map' got an unexpected argument '" + k + "'");
      }
      if (attr) {
        if (!a.pos.empty())
          fail_at(line, "filter 'map' with both attribute and a filter");
        std::string path = str(*attr, line);
        for (Value& x : items(v, line))
          out.push_back(attr_path(x, path, line, dflt));
      } else {
        if (a.pos.empty())
          fail_at(line, "filter 'map' needs a filter name or attribute=");
        std::string fname = str(a.pos[0], line);
        if (!kFilters.count(fname))
          gap_at(line, "filter '" + fname + "' is not supported");
        for (Value& x : items(v, line)) {
          Args sub;
          sub.pos.assign(a.pos.begin() + 1, a.pos.end());
          sub.kw = a.kw;
          sub.line = line;
          out.push_back(apply_filter(fname, x, sub));
        }
      }
      return v_list(std::move(out), LT::generator);
    }
    if (name == "unique") {
      a.allow({"case_sensitive", "attribute"});
      auto cs = a.get(0, "case_sensitive");
      auto at = a.get(1, "attribute");
      bool sensitive = cs && truthy(*cs);
      ValueList out, keys;
      for (Value& x : items(v, line)) {
        Value key = at ? attr_path(x, str(*at, line), line) : x;
        if (!sensitive && key.t == VT::string)
          key = v_str(ascii_case(key.sv, line, "unique", 0));
        bool seen = false;
        for (auto& k : keys)
          if (equal(k, key, line)) seen = true;
        if (!seen) {
          keys.push_back(key);
          out.push_back(x);
        }
      }
      return v_list(std::move(out), LT::generator);
    }
    if (name == "dictsort") {
      a.allow({"case_sensitive", "by", "reverse"});
      if (v.t != VT::dict) fail_at(line, "filter 'dictsort' needs a dict");
      auto cs = a.get(0, "case_sensitive");
      auto by = a.get(1, "by");
      auto rev = a.get(2, "reverse");
      bool sensitive = cs && truthy(*cs);
      bool by_value = by && by->t == VT::string && by->sv == "value";
      if (by &&
          !(by->t == VT::string && (by->sv == "key" || by->sv == "value")))
        fail_at(line, "dictsort: by must be 'key' or 'value'");
      ValueList xs = items(dict_items(v), line);
      auto key = [&](const Value& pair) {
        Value k = list_at(pair, by_value ? 1 : 0);
        if (!sensitive && k.t == VT::string)
          return v_str(ascii_case(k.sv, line, "dictsort", 0));
        return k;
      };
      std::stable_sort(xs.begin(), xs.end(),
                       [&](const Value& x, const Value& y) {
                         return less(key(x), key(y), line);
                       });
      if (rev && truthy(*rev)) std::reverse(xs.begin(), xs.end());
      return v_list(std::move(xs));
    }
    gap_at(line, "filter '" + name + "' is not supported");
  }

  // ------------------------------------------------------------ arithmetic

  Value arith(const std::string& op, const Value& l, const Value& r, int line) {
    if (op == "~") {
      std::string s = str(l, line);
      s += str(r, line);
      check_size(s.size(), line);
      return v_str(std::move(s));
    }
    if (l.t == VT::undefined) undefined_error(l, line);
    if (r.t == VT::undefined) undefined_error(r, line);
    auto type_err = [&]() -> Value {
      fail_at(line, std::string("unsupported operand type(s) for ") + op +
                        ": '" + type_name(l) + "' and '" + type_name(r) + "'");
    };
    if (numeric(l) && numeric(r)) {
      bool fl = l.t == VT::floating || r.t == VT::floating;
      if (op == "/") {
        if (num(r) == 0) fail_at(line, "division by zero");
        return v_float(num(l) / num(r));
      }
      if (fl) {
        double a = num(l), b = num(r);
        if (op == "+") return v_float(a + b);
        if (op == "-") return v_float(a - b);
        if (op == "*") return v_float(a * b);
        if (op == "**") return v_float(std::pow(a, b));
        if (b == 0) fail_at(line, "float division by zero");
        if (op == "//") return v_float(std::floor(a / b));
        if (op == "%") {
          double m = std::fmod(a, b);
          if (m != 0 && ((m < 0) != (b < 0))) m += b;
          return v_float(m);
        }
        return type_err();
      }
      int64_t a = inum(l), b = inum(r), out = 0;
      if (op == "+") {
        if (__builtin_add_overflow(a, b, &out))
          gap_at(line, "integer overflow");
        return v_int(out);
      }
      if (op == "-") {
        if (__builtin_sub_overflow(a, b, &out))
          gap_at(line, "integer overflow");
        return v_int(out);
      }
      if (op == "*") {
        if (__builtin_mul_overflow(a, b, &out))
          gap_at(line, "integer overflow");
        return v_int(out);
      }
      if (op == "**") {
        if (b < 0)
          return v_float(
              std::pow(static_cast<double>(a), static_cast<double>(b)));
        int64_t res = 1;
        for (int64_t k = 0; k < b; ++k) {
          if (__builtin_mul_overflow(res, a, &res))
            gap_at(line, "integer overflow");
          if (res == 0 || res == 1) break;
        }
        return v_int(res);
      }
      if (b == 0) fail_at(line, "integer division or modulo by zero");
      if (op == "//" || op == "%") {
        if (a == std::numeric_limits<int64_t>::min() && b == -1)
          gap_at(line, "integer overflow");
        int64_t q = a / b, m = a % b;
        if (m != 0 && ((m < 0) != (b < 0))) {
          --q;
          m += b;
        }
        return v_int(op == "//" ? q : m);
      }
      return type_err();
    }
    if (op == "+") {
      if (l.t == VT::string && r.t == VT::string) {
        std::string s;
        s.reserve(l.sv.size() + r.sv.size());
        s.append(l.sv);
        s.append(r.sv);
        check_size(s.size(), line);
        return v_str(std::move(s));
      }
      if (l.t == VT::list && r.t == VT::list && l.lt == r.lt &&
          (l.lt == LT::list || l.lt == LT::tuple)) {
        ValueList xs = items(l, line);
        for (auto& x : items(r, line))
          xs.push_back(x);
        return v_list(std::move(xs), l.lt);
      }
      return type_err();
    }
    if (op == "*") {
      const Value& seq = l.t == VT::integer || l.t == VT::boolean ? r : l;
      const Value& cnt = &seq == &l ? r : l;
      if ((cnt.t == VT::integer || cnt.t == VT::boolean) &&
          (seq.t == VT::string ||
           (seq.t == VT::list &&
            (seq.lt == LT::list || seq.lt == LT::tuple)))) {
        int64_t n = std::max<int64_t>(0, inum(cnt));
        if (seq.t == VT::string) {
          check_size(static_cast<size_t>(std::min<int64_t>(n, 1 << 30)) *
                         seq.sv.size(),
                     line);
          std::string s;
          for (int64_t k = 0; k < n; ++k)
            s.append(seq.sv);
          return v_str(std::move(s));
        }
        check_size(
            static_cast<size_t>(std::min<int64_t>(n, 1 << 30)) * list_size(seq),
            line);
        ValueList base = items(seq, line), xs;
        for (int64_t k = 0; k < n; ++k)
          xs.insert(xs.end(), base.begin(), base.end());
        return v_list(std::move(xs), seq.lt);
      }
      return type_err();
    }
    if (op == "%" && l.t == VT::string)
      gap_at(line, "printf-style string formatting ('%') is not supported");
    return type_err();
  }

  // ------------------------------------------------------------ eval

  Value eval(const Expr& e) {
    step(e.line);
    switch (e.k) {
      case EK::constant:
        return e.constant;
      case EK::name:
        return lookup(e.name);
      case EK::getattr:
        return getattr(eval(*e.args[0]), e.name, e.line);
      case EK::getitem: {
        Value obj = eval(*e.args[0]);
        return getitem(obj, eval(*e.args[1]), e.line);
      }
      case EK::slice: {
        Value obj = eval(*e.args[0]);
        std::optional<Value> b, en, st;
        if (e.args[1]) b = eval(*e.args[1]);
        if (e.args[2]) en = eval(*e.args[2]);
        if (e.args[3]) st = eval(*e.args[3]);
        return slice(obj, b ? &*b : nullptr, en ? &*en : nullptr,
                     st ? &*st : nullptr, e.line);
      }
      case EK::call: {
        Value f = eval(*e.args[0]);
        Args a = eval_args(e);
        return call_value(f, a, e.line);
      }
      case EK::filter: {
        Value v = eval(*e.args[0]);
        Args a = eval_args(e);
        return apply_filter(e.name, v, a);
      }
      case EK::test: {
        Value v = eval(*e.args[0]);
        Args a = eval_args(e);
        for (auto& kv : a.kw)
          a.pos.push_back(kv.second);
        bool r = test(e.name, v, a.pos, e.line);
        return v_bool(e.negated ? !r : r);
      }
      case EK::neg:
      case EK::pos: {
        Value v = eval(*e.args[0]);
        if (v.t == VT::undefined) undefined_error(v, e.line);
        if (!numeric(v))
          fail_at(e.line, std::string("bad operand type for unary ") +
                              (e.k == EK::neg ? "-" : "+") + ": '" +
                              type_name(v) + "'");
        if (e.k == EK::pos) return v.t == VT::boolean ? v_int(v.b) : v;
        if (v.t == VT::floating) return v_float(-v.f);
        if (inum(v) == std::numeric_limits<int64_t>::min())
          gap_at(e.line, "integer overflow");
        return v_int(-inum(v));
      }
      case EK::not_:
        return v_bool(!truthy(eval(*e.args[0])));
      case EK::and_: {
        Value l = eval(*e.args[0]);
        return truthy(l) ? eval(*e.args[1]) : l;
      }
      case EK::or_: {
        Value l = eval(*e.args[0]);
        return truthy(l) ? l : eval(*e.args[1]);
      }
      case EK::binary: {
        Value l = eval(*e.args[0]);
        Value r = eval(*e.args[1]);
        return arith(e.name, l, r, e.line);
      }
      case EK::compare: {
        Value l = eval(*e.args[0]);
        for (size_t k = 0; k < e.ops.size(); ++k) {
          Value r = eval(*e.args[k + 1]);
          if (!compare(e.ops[k], l, r, e.line)) return v_bool(false);
          l = std::move(r);
        }
        return v_bool(true);
      }
      case EK::cond:
        if (truthy(eval(*e.args[1]))) return eval(*e.args[0]);
        if (e.args.size() > 2) return eval(*e.args[2]);
        return v_undef(
            "the inline if expression has no else and its condition was false");
      case EK::list:
      case EK::tuple: {
        ValueList xs;
        for (auto& a : e.args)
          xs.push_back(eval(*a));
        return v_list(std::move(xs), e.k == EK::tuple ? LT::tuple : LT::list);
      }
      case EK::dict: {
        ValueDict d;
        for (size_t k = 0; k + 1 < e.args.size(); k += 2) {
          Value key = eval(*e.args[k]);
          if (key.t != VT::string)
            gap_at(e.line,
                   "dict literal keys other than strings are not supported");
          Value val = eval(*e.args[k + 1]);
          bool found = false;
          for (auto& [dk, dv] : d)
            if (dk == key.sv) dv = val, found = true;
          if (!found) d.emplace_back(std::string(key.sv), std::move(val));
        }
        return v_dict(std::move(d));
      }
    }
    gap_at(e.line, "unknown expression");
  }

  Args eval_args(const Expr& e) {
    Args a;
    a.line = e.line;
    for (size_t k = 1; k < e.args.size(); ++k)
      a.pos.push_back(eval(*e.args[k]));
    for (auto& [key, ex] : e.kwargs)
      a.kw.emplace_back(key, eval(*ex));
    return a;
  }

  // ------------------------------------------------------------ statements

  void assign(const Expr& target, const Value& v, int line) {
    if (target.k == EK::name) {
      scopes.back().set(target.name, v);
      return;
    }
    if (target.k == EK::getattr) {
      Value obj = lookup(target.args[0]->name);
      if (obj.t != VT::ns)
        fail_at(line, "cannot assign attribute on non-namespace object");
      for (auto& [k, val] : *obj.dict)
        if (k == target.name) {
          val = v;
          return;
        }
      obj.dict->emplace_back(target.name, v);
      return;
    }
    // tuple unpacking
    ValueList xs = items(v, line);
    if (xs.size() != target.args.size())
      fail_at(line, "cannot unpack " + std::to_string(xs.size()) +
                        " values into " + std::to_string(target.args.size()));
    for (size_t k = 0; k < xs.size(); ++k)
      assign(*target.args[k], xs[k], line);
  }

  void emit(std::string& out, std::string_view s, int line) {
    out.append(s);
    check_size(out.size(), line);
  }

  Flow exec(const Body& body, std::string& out) {
    for (const NodeP& np : body) {
      const Node& n = *np;
      step(n.line);
      switch (n.k) {
        case NK::text:
          emit(out, n.text, n.line);
          break;
        case NK::output: {
          Value v = eval(*n.expr);
          if (v.t == VT::string) {
            emit(out, v.sv, n.line);
          } else {
            to_str(v, out, n.line);
            check_size(out.size(), n.line);
          }
          break;
        }
        case NK::if_: {
          bool done = false;
          for (auto& [cond, b] : n.branches) {
            if (truthy(eval(*cond))) {
              Flow f = exec(b, out);
              if (f != Flow::normal) return f;
              done = true;
              break;
            }
          }
          if (!done) {
            Flow f = exec(n.else_body, out);
            if (f != Flow::normal) return f;
          }
          break;
        }
        case NK::for_:
          run_for(n, out);
          break;
        case NK::set:
          assign(*n.target, eval(*n.expr), n.line);
          break;
        case NK::set_block: {
          std::string captured;
          Flow f = exec(n.body, captured);
          if (f != Flow::normal) return f;
          assign(*n.target, v_str(std::move(captured)), n.line);
          break;
        }
        case NK::macro:
          define_macro(n);
          break;
        case NK::break_:
          return Flow::break_;
        case NK::continue_:
          return Flow::continue_;
        case NK::block: {
          Flow f = exec(n.body, out);
          if (f != Flow::normal) return f;
          break;
        }
      }
    }
    return Flow::normal;
  }

  void run_for(const Node& n, std::string& out) {
    ValueList xs = items(eval(*n.expr), n.line);
    if (n.filter) {
      ValueList kept;
      for (auto& x : xs) {
        step(n.line);
        scopes.emplace_back();
        assign(*n.target, x, n.line);
        bool ok = truthy(eval(*n.filter));
        scopes.pop_back();
        if (ok) kept.push_back(std::move(x));
      }
      xs = std::move(kept);
    }
    if (xs.empty()) {
      exec(n.else_body, out);
      return;
    }
    auto len = static_cast<int64_t>(xs.size());
    for (int64_t k = 0; k < len; ++k) {
      step(n.line);  // an empty body costs its iterations too
      scopes.emplace_back();
      ValueDict loop = {
          {"index", v_int(k + 1)},
          {"index0", v_int(k)},
          {"revindex", v_int(len - k)},
          {"revindex0", v_int(len - k - 1)},
          {"first", v_bool(k == 0)},
          {"last", v_bool(k == len - 1)},
          {"length", v_int(len)},
          {"previtem", k > 0 ? xs[static_cast<size_t>(k - 1)]
                             : v_undef("there is no previous item")},
          {"nextitem", k + 1 < len ? xs[static_cast<size_t>(k + 1)]
                                   : v_undef("there is no next item")}};
      scopes.back().set("loop", v_dict(std::move(loop), VT::loop));
      assign(*n.target, xs[static_cast<size_t>(k)], n.line);
      Flow f = exec(n.body, out);
      scopes.pop_back();
      if (f == Flow::break_) break;
    }
  }

  void define_macro(const Node& n) {
    const Node* def = &n;
    scopes.back().set(
        n.text, v_func(n.text, [def](Renderer& r, Args& a) {
          if (a.pos.size() > def->params.size())
            fail_at(a.line, "macro '" + def->text + "' takes not more than " +
                                std::to_string(def->params.size()) +
                                " arguments");
          Scope s;
          for (size_t k = 0; k < def->params.size(); ++k) {
            const std::string& p = def->params[k];
            std::optional<Value> v;
            if (k < a.pos.size()) v = a.pos[k];
            for (auto& [key, val] : a.kw)
              if (key == p) v = val;
            if (!v) {
              if (def->defaults[k]) {
                r.scopes.push_back(s);
                v = r.eval(*def->defaults[k]);
                r.scopes.pop_back();
              } else {
                v = v_undef("parameter '" + p + "' was not provided");
              }
            }
            s.set(p, *v);
          }
          for (auto& [key, val] : a.kw)
            if (std::find(def->params.begin(), def->params.end(), key) ==
                def->params.end())
              fail_at(a.line, "macro '" + def->text +
                                  "' takes no keyword argument '" + key + "'");
          // The macro sees the template's top level and its arguments.
          std::vector<Scope> saved;
          saved.swap(r.scopes);
          r.scopes.push_back(saved.front());
          r.scopes.push_back(std::move(s));
          std::string out;
          try {
            r.exec(def->body, out);
          } catch (...) {
            r.scopes.swap(saved);
            throw;
          }
          r.scopes.swap(saved);
          return v_str(std::move(out));
        }));
  }
};

}  // namespace

expected<chat_template> chat_template::parse(std::string_view source) {
  try {
    auto p = std::make_shared<program>();
    p->body = Parser(Lexer(source).run()).run();
    return chat_template(std::move(p));
  } catch (const template_error& e) {
    return make_error(ec::parse_error, e.what());
  } catch (const std::exception& e) {
    return make_error(ec::parse_error,
                      std::string("chat template: ") + e.what());
  }
}

expected<std::string> chat_template::render(
    const nlohmann::ordered_json& context) const {
  return render(context, chat_template_render_options{});
}

expected<std::string> chat_template::render(
    const nlohmann::ordered_json& context,
    const chat_template_render_options& options) const {
  if (!context.is_object())
    return make_error(ec::invalid_argument,
                      "chat template: the context must be a JSON object");
  try {
    Renderer r(context, options);
    std::string out;
    r.exec(program_->body, out);
    return out;
  } catch (const template_error& e) {
    return make_error(e.kind == failure::gap     ? ec::parse_error
                      : e.kind == failure::bound ? ec::capacity_exceeded
                                                 : ec::invalid_argument,
                      e.what());
  } catch (const std::exception& e) {
    // Not Python's error: the renderer's own (out of memory, ...).
    return make_error(ec::parse_error,
                      std::string("chat template: ") + e.what());
  }
}

namespace {

// vLLM's reading of a template's AST (renderers/hf.py,
// _detect_content_format), over this parser's: whether `e` is `v`, or
// `v['key']` / `v.key` when key is given, under filters, tests and slices.
bool reads(const Expr* e, const std::string& v, const char* key) {
  if (!e) return false;
  if (e->k == EK::filter || e->k == EK::test || e->k == EK::slice)
    return reads(e->args[0].get(), v, key);
  auto is_v = [&](const Expr* x) {
    return x && x->k == EK::name && x->name == v;
  };
  if (!key) return is_v(e);
  if (e->k == EK::getattr) return is_v(e->args[0].get()) && e->name == key;
  if (e->k == EK::getitem) {
    const Expr* k = e->args[1].get();
    return is_v(e->args[0].get()) && k && k->k == EK::constant &&
           k->constant.t == VT::string && k->constant.sv == key;
  }
  return false;
}

// Every set and for node, in document order (Jinja's find_all).
void collect(const Body& body, std::vector<const Node*>& sets,
             std::vector<const Node*>& fors) {
  for (const NodeP& n : body) {
    if (n->k == NK::set) sets.push_back(n.get());
    if (n->k == NK::for_) fors.push_back(n.get());
    for (const auto& [cond, b] : n->branches)
      collect(b, sets, fors);
    collect(n->body, sets, fors);
    collect(n->else_body, sets, fors);
  }
}

}  // namespace

bool chat_template::takes_content_parts() const {
  std::vector<const Node*> sets, fors;
  collect(program_->body, sets, fors);
  auto is_name = [](const ExprP& t) { return t && t->k == EK::name; };
  // The names the messages go by: `messages`, and what is set from them.
  // vLLM asserts every such target is a plain name; a failed assertion
  // falls back to strings.
  std::vector<std::string> lists{"messages"};
  for (size_t i = 0; i < lists.size(); ++i)
    for (const Node* s : sets) {
      if (!reads(s->expr.get(), lists[i], nullptr)) continue;
      if (!is_name(s->target)) return false;
      // A name set twice is read once (vLLM would loop on a cycle).
      if (std::find(lists.begin(), lists.end(), s->target->name) == lists.end())
        lists.push_back(s->target->name);
    }
  // The names a message goes by: the targets of loops over those.
  std::vector<std::string> messages;
  for (const Node* f : fors)
    for (const auto& l : lists)
      if (reads(f->expr.get(), l, nullptr)) {
        if (!is_name(f->target)) return false;
        messages.push_back(f->target->name);
        break;
      }
  // The first loop over a message's content decides.
  for (const Node* f : fors)
    for (const auto& m : messages)
      if (reads(f->expr.get(), m, "content")) return is_name(f->target);
  return false;
}

}  // namespace kvmesh
