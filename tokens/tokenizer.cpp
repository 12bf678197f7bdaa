// tokenizer.json read strictly into added tokens, normalizer, Split regexes,
// byte-level BPE and template, and the encode pipeline that runs them.
//
// NFC is Debian's libutf8proc (2.8, Unicode 15): a small C library whose
// one call normalizes a buffer of given length, where ICU (also in Debian)
// would bring a 30 MB data library into the runtime image for one function.
#include "tokens/tokenizer.hpp"

#include <utf8proc.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <initializer_list>
#include <sstream>
#include <unordered_map>

#include <nlohmann/json.hpp>

#include "core/json_guard.hpp"
#include "tokens/bpe.hpp"
#include "tokens/split_regex.hpp"

namespace kvmesh {

namespace {

using json = nlohmann::json;

error refuse(const std::string& what) {
  return make_error(ec::invalid_argument,
                    "tokenizer.json: " + what + " is not supported");
}
error malformed(const std::string& what) {
  return make_error(ec::parse_error, "tokenizer.json: " + what);
}

// Every field of `o` is one of `keys`: a field this reader does not know
// may change the ids, so it fails the load.
status only_keys(const json& o, std::initializer_list<const char*> keys,
                 const std::string& where) {
  for (auto it = o.begin(); it != o.end(); ++it) {
    bool known = false;
    for (const char* k : keys)
      known = known || it.key() == k;
    if (!known) return refuse("field '" + it.key() + "' in " + where);
  }
  return ok;
}

bool is_null(const json& o, const char* key) {
  auto it = o.find(key);
  return it == o.end() || it->is_null();
}

// A boolean field: absent or null gives `dflt`.
expected<bool> flag(const json& o, const char* key, bool dflt,
                    const std::string& where) {
  auto it = o.find(key);
  if (it == o.end() || it->is_null()) return dflt;
  if (!it->is_boolean())
    return malformed(where + " field '" + key + "' is not a boolean");
  return it->get<bool>();
}

// A boolean field that must be `want` to be supported (absent: `dflt`).
status require_flag(const json& o, const char* key, bool dflt, bool want,
                    const std::string& where) {
  expected<bool> v = flag(o, key, dflt, where);
  if (!v) return v.err();
  if (*v != want)
    return refuse(where + " with " + key + "=" + (*v ? "true" : "false"));
  return ok;
}

std::string type_of(const json& o) {
  auto it = o.find("type");
  if (it == o.end() || !it->is_string()) return "";
  return it->get<std::string>();
}

expected<uint32_t> id_value(const json& v, const std::string& where) {
  if (!v.is_number_unsigned() || v.get<uint64_t>() >= 0xFFFFFFFFull)
    return malformed(where + " is not an id (an unsigned 32-bit integer)");
  return static_cast<uint32_t>(v.get<uint64_t>());
}

// The byte offset of the first byte that is not valid UTF-8, or npos.
size_t invalid_utf8(std::string_view s) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const size_t n = s.size();
  size_t i = 0;
  while (i < n) {
    if (i + 8 <= n) {
      uint64_t w;
      std::memcpy(&w, p + i, 8);
      if ((w & 0x8080808080808080ull) == 0) {
        i += 8;
        continue;
      }
    }
    const unsigned c = p[i];
    if (c < 0x80) {
      ++i;
      continue;
    }
    size_t len;
    uint32_t min;
    if (c >= 0xC2 && c <= 0xDF) {
      len = 2, min = 0x80;
    } else if (c >= 0xE0 && c <= 0xEF) {
      len = 3, min = 0x800;
    } else if (c >= 0xF0 && c <= 0xF4) {
      len = 4, min = 0x10000;
    } else {
      return i;
    }
    if (i + len > n) return i;
    uint32_t cp = c & (0xFF >> (len + 1));
    for (size_t k = 1; k < len; ++k) {
      if ((p[i + k] & 0xC0) != 0x80) return i;
      cp = (cp << 6) | (p[i + k] & 0x3F);
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return i;
    i += len;
  }
  return std::string_view::npos;
}

// Code points whose NFC quick check is Yes and whose combining class is 0,
// in blocks whose normalization has been fixed since Unicode 3 (a subset is
// enough: anything else goes to utf8proc). A string of only these is in NFC
// already (UAX #15, quick check), and utf8proc costs some 40 ns a byte.
bool nfc_stable(uint32_t cp) {
  return cp < 0x300 || (cp >= 0x400 && cp <= 0x482) ||
         (cp >= 0x48A && cp <= 0x4FF) || (cp >= 0x621 && cp <= 0x64A) ||
         (cp >= 0x3000 && cp <= 0x3029) || (cp >= 0x3041 && cp <= 0x3096) ||
         (cp >= 0x30A1 && cp <= 0x30FA) || (cp >= 0x4E00 && cp <= 0x9FFF) ||
         (cp >= 0xAC00 && cp <= 0xD7A3) || (cp >= 0xFF01 && cp <= 0xFF5E) ||
         cp == 0x200D || cp == 0xFE0F || (cp >= 0x1F300 && cp <= 0x1FAFF);
}

// NFC of valid UTF-8 `s` into `out`; false (and `out` untouched) when `s`
// is in NFC already. Only the stretches around code points that are not
// nfc_stable go through utf8proc: a stretch starts at the last stable code
// point before (a composition boundary is before every stable one: nothing
// combines with what precedes it) and ends before the next stable one.
expected<bool> nfc(std::string_view s, std::string& out) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const size_t n = s.size();
  size_t boundary = 0, copied = 0, dirty_from = 0;
  bool dirty = false, changed = false;
  auto flush = [&](size_t end) -> status {
    if (!changed) out.clear();
    changed = true;
    out.append(s.substr(copied, dirty_from - copied));
    utf8proc_uint8_t* dst = nullptr;
    const utf8proc_ssize_t len = utf8proc_map(
        p + dirty_from, static_cast<utf8proc_ssize_t>(end - dirty_from), &dst,
        static_cast<utf8proc_option_t>(UTF8PROC_STABLE | UTF8PROC_COMPOSE));
    if (len < 0)
      return make_error(
          ec::invalid_argument,
          std::string("tokenizer: NFC failed: ") + utf8proc_errmsg(len));
    out.append(reinterpret_cast<const char*>(dst), static_cast<size_t>(len));
    std::free(dst);
    copied = end;
    dirty = false;
    return ok;
  };
  for (size_t i = 0; i < n;) {
    const unsigned c = p[i];
    uint32_t cp;
    size_t len;
    if (c < 0x80) {
      cp = c, len = 1;
    } else if (c < 0xE0) {
      cp = ((c & 0x1Fu) << 6) | (p[i + 1] & 0x3Fu), len = 2;
    } else if (c < 0xF0) {
      cp = ((c & 0x0Fu) << 12) | ((p[i + 1] & 0x3Fu) << 6) | (p[i + 2] & 0x3Fu);
      len = 3;
    } else {
      cp = ((c & 0x07u) << 18) | ((p[i + 1] & 0x3Fu) << 12) |
           ((p[i + 2] & 0x3Fu) << 6) | (p[i + 3] & 0x3Fu);
      len = 4;
    }
    if (nfc_stable(cp)) {
      if (dirty)
        if (status st = flush(i); !st) return st.err();
      boundary = i;
    } else if (!dirty) {
      dirty = true;
      dirty_from = boundary;
    }
    i += len;
  }
  if (dirty)
    if (status st = flush(n); !st) return st.err();
  if (!changed) return false;
  out.append(s.substr(copied));
  return true;
}

}  // namespace

struct tokenizer::impl {
  bpe_model model;
  std::vector<split_regex> splits;  // applied in turn, then ByteLevel
  bool nfc = false;

  // Added tokens: a byte trie matched leftmost, then longest.
  struct node {
    std::vector<std::pair<uint8_t, uint32_t>> next;
    int64_t id = -1;
  };
  std::vector<node> trie{node{}};
  bool starts[256] = {};
  size_t added = 0, special = 0;

  std::vector<uint32_t> prefix, suffix;  // the template's, around A
  std::vector<std::string> prefix_names, suffix_names;
  bool has_template = false;

  std::unordered_map<std::string, uint32_t> ids;  // token_id()
  size_t vocab_size = 0;
  std::string family;

  void add_token(const std::string& content, uint32_t id) {
    uint32_t at = 0;
    for (unsigned char c : content) {
      uint32_t child = 0;
      for (const auto& [b, to] : trie[at].next)
        if (b == c) child = to;
      if (child == 0) {
        child = static_cast<uint32_t>(trie.size());
        trie[at].next.emplace_back(c, child);
        trie.emplace_back();
      }
      at = child;
    }
    trie[at].id = id;
    starts[static_cast<unsigned char>(content[0])] = true;
  }

  // The length of the longest added token at text[i], and its id.
  size_t match(std::string_view text, size_t i, uint32_t* id) const {
    size_t best = 0;
    uint32_t at = 0;
    for (size_t j = i; j < text.size(); ++j) {
      const unsigned char c = static_cast<unsigned char>(text[j]);
      uint32_t child = 0;
      for (const auto& [b, to] : trie[at].next)
        if (b == c) child = to;
      if (child == 0) break;
      at = child;
      if (trie[at].id >= 0) {
        best = j + 1 - i;
        *id = static_cast<uint32_t>(trie[at].id);
      }
    }
    return best;
  }

  status pre_tokenize(std::string_view s, size_t level,
                      std::vector<uint32_t>& out) const {
    if (s.empty()) return ok;
    if (level == splits.size()) {
      model.encode(s, out);
      return ok;
    }
    const split_regex& re = splits[level];
    size_t pos = 0;
    while (pos < s.size()) {
      size_t b = 0, e = 0;
      expected<bool> found = re.find(s, pos, &b, &e);
      if (!found) return found.err();
      if (!*found) break;
      if (e <= b)  // compile() refuses patterns that match nothing
        return make_error(ec::invalid_argument,
                          "tokenizer: Split regex matched the empty string");
      // Isolated: the text between matches is a piece of its own.
      if (b > pos)
        if (status st = pre_tokenize(s.substr(pos, b - pos), level + 1, out);
            !st)
          return st;
      if (status st = pre_tokenize(s.substr(b, e - b), level + 1, out); !st)
        return st;
      pos = e;
    }
    if (pos < s.size()) return pre_tokenize(s.substr(pos), level + 1, out);
    return ok;
  }

  // Text between added tokens: normalized, pre-tokenized, then the model.
  status segment(std::string_view s, std::vector<uint32_t>& out) const {
    if (s.empty()) return ok;
    if (nfc) {
      std::string normalized;
      expected<bool> changed = kvmesh::nfc(s, normalized);
      if (!changed) return changed.err();
      if (*changed) return pre_tokenize(normalized, 0, out);
    }
    return pre_tokenize(s, 0, out);
  }

  status encode(std::string_view text, bool add_special,
                std::vector<uint32_t>& out) const {
    out.clear();
    if (size_t bad = invalid_utf8(text); bad != std::string_view::npos)
      return make_error(ec::invalid_argument,
                        "tokenizer: text is not valid UTF-8 (at byte " +
                            std::to_string(bad) + ")");
    out.reserve(text.size() / 3 + prefix.size() + suffix.size() + 4);
    if (add_special) out.insert(out.end(), prefix.begin(), prefix.end());
    size_t start = 0;
    for (size_t i = 0; i < text.size();) {
      uint32_t id = 0;
      const size_t len =
          starts[static_cast<unsigned char>(text[i])] ? match(text, i, &id) : 0;
      if (len == 0) {
        ++i;
        continue;
      }
      if (status st = segment(text.substr(start, i - start), out); !st)
        return st;
      out.push_back(id);
      i += len;
      start = i;
    }
    if (status st = segment(text.substr(start), out); !st) return st;
    if (add_special) out.insert(out.end(), suffix.begin(), suffix.end());
    return ok;
  }
};

namespace {

using impl = tokenizer::impl;

expected<bpe_model> read_model(const json& m, impl& t) {
  const std::string where = "model";
  if (!m.is_object()) return malformed("model is not an object");
  const std::string type = type_of(m);
  if (type != "BPE") return refuse("model type '" + type + "'");
  if (status s = only_keys(
          m,
          {"type", "dropout", "unk_token", "continuing_subword_prefix",
           "end_of_word_suffix", "fuse_unk", "byte_fallback", "ignore_merges",
           "vocab", "merges"},
          "model BPE");
      !s)
    return s.err();
  if (auto it = m.find("dropout"); it != m.end() && !it->is_null() &&
                                   !(it->is_number() && it->get<double>() == 0))
    return refuse("model BPE dropout");
  if (!is_null(m, "unk_token")) return refuse("model BPE unk_token");
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    auto it = m.find(key);
    if (it != m.end() && !it->is_null() &&
        !(it->is_string() && it->get<std::string>().empty()))
      return refuse(std::string("model BPE ") + key);
  }
  if (status s = require_flag(m, "fuse_unk", false, false, "model BPE"); !s)
    return s.err();
  if (status s = require_flag(m, "byte_fallback", false, false, "model BPE");
      !s)
    return s.err();
  expected<bool> ignore = flag(m, "ignore_merges", false, where);
  if (!ignore) return ignore.err();

  auto v = m.find("vocab");
  if (v == m.end() || !v->is_object())
    return malformed("model vocab is missing or not an object");
  std::vector<std::pair<std::string, uint32_t>> vocab;
  vocab.reserve(v->size());
  for (auto it = v->begin(); it != v->end(); ++it) {
    expected<uint32_t> id = id_value(it.value(), "model vocab value");
    if (!id) return id.err();
    vocab.emplace_back(it.key(), *id);
  }
  auto ms = m.find("merges");
  if (ms == m.end() || !ms->is_array())
    return malformed("model merges is missing or not an array");
  std::vector<std::pair<std::string, std::string>> merges;
  merges.reserve(ms->size());
  const bool arrays = !ms->empty() && (*ms)[0].is_array();
  for (size_t r = 0; r < ms->size(); ++r) {
    const json& e = (*ms)[r];
    if (arrays) {
      if (!e.is_array() || e.size() != 2 || !e[0].is_string() ||
          !e[1].is_string())
        return malformed("merge " + std::to_string(r) +
                         " is not a pair of strings");
      merges.emplace_back(e[0].get<std::string>(), e[1].get<std::string>());
    } else {
      if (!e.is_string())
        return malformed("merge " + std::to_string(r) + " is not a string");
      const std::string& line = e.get_ref<const std::string&>();
      if (line.rfind("#version", 0) == 0) continue;  // HF skips these
      const size_t sp = line.find(' ');
      if (sp == std::string::npos ||
          line.find(' ', sp + 1) != std::string::npos)
        return malformed("merge " + std::to_string(r) + " '" + line +
                         "' is not two tokens separated by one space");
      merges.emplace_back(line.substr(0, sp), line.substr(sp + 1));
    }
  }
  t.vocab_size = vocab.size();
  for (const auto& [token, id] : vocab)
    t.ids.emplace(token, id);
  return bpe_model::build(vocab, merges, *ignore);
}

status read_added_tokens(const json& root, impl& t) {
  auto a = root.find("added_tokens");
  if (a == root.end() || a->is_null()) return ok;
  if (!a->is_array()) return malformed("added_tokens is not an array");
  // HF gives each token its vocab id, or else the next id from the vocab's
  // size on; a tokenizer.json that says otherwise would get ids here that
  // differ from the engine's.
  uint32_t next_id = static_cast<uint32_t>(t.vocab_size);
  std::unordered_map<std::string, uint32_t> seen;
  for (const json& e : *a) {
    if (!e.is_object()) return malformed("an added token is not an object");
    if (status s = only_keys(e,
                             {"id", "content", "single_word", "lstrip",
                              "rstrip", "normalized", "special"},
                             "added_tokens");
        !s)
      return s;
    auto c = e.find("content");
    if (c == e.end() || !c->is_string())
      return malformed("an added token has no content string");
    const std::string content = c->get<std::string>();
    auto i = e.find("id");
    if (i == e.end())
      return malformed("added token '" + content + "' has no id");
    expected<uint32_t> id = id_value(*i, "added token '" + content + "' id");
    if (!id) return id.err();
    const std::string where = "added token '" + content + "'";
    for (const char* key : {"single_word", "lstrip", "rstrip", "normalized"})
      if (status s = require_flag(e, key, false, false, where); !s) return s;
    expected<bool> special = flag(e, "special", false, where);
    if (!special) return special.err();
    if (content.empty()) continue;  // HF ignores it
    if (seen.count(content))
      return refuse("added token '" + content + "' listed twice");
    uint32_t hf_id;
    if (auto v = t.ids.find(content); v != t.ids.end())
      hf_id = v->second;
    else
      hf_id = next_id++;
    if (hf_id != *id)
      return refuse(where + " with id " + std::to_string(*id) +
                    " (HF tokenizers gives it id " + std::to_string(hf_id) +
                    ")");
    seen.emplace(content, *id);
    t.add_token(content, *id);
    ++t.added;
    if (*special) ++t.special;
  }
  for (const auto& [content, id] : seen)
    t.ids[content] = id;
  return ok;
}

status read_normalizer(const json& root, impl& t) {
  auto n = root.find("normalizer");
  if (n == root.end() || n->is_null()) return ok;
  if (!n->is_object()) return malformed("normalizer is not an object");
  const std::string type = type_of(*n);
  if (type != "NFC") return refuse("normalizer type '" + type + "'");
  if (status s = only_keys(*n, {"type"}, "normalizer NFC"); !s) return s;
  t.nfc = true;
  return ok;
}

status read_pre_tokenizer(const json& root, impl& t) {
  auto p = root.find("pre_tokenizer");
  if (p == root.end() || p->is_null())
    return refuse("a missing pre_tokenizer (byte-level BPE needs ByteLevel)");
  if (!p->is_object()) return malformed("pre_tokenizer is not an object");
  std::vector<const json*> steps;
  if (type_of(*p) == "Sequence") {
    if (status s =
            only_keys(*p, {"type", "pretokenizers"}, "pre_tokenizer Sequence");
        !s)
      return s;
    auto list = p->find("pretokenizers");
    if (list == p->end() || !list->is_array())
      return malformed("pre_tokenizer Sequence has no pretokenizers array");
    for (const json& step : *list)
      steps.push_back(&step);
  } else {
    steps.push_back(&*p);
  }
  bool byte_level = false;
  for (const json* step : steps) {
    if (!step->is_object())
      return malformed("a pre_tokenizer is not an object");
    const std::string type = type_of(*step);
    if (byte_level)
      return refuse("pre_tokenizer '" + type + "' after ByteLevel");
    if (type == "Split") {
      if (status s = only_keys(*step, {"type", "pattern", "behavior", "invert"},
                               "pre_tokenizer Split");
          !s)
        return s;
      auto pattern = step->find("pattern");
      if (pattern == step->end() || !pattern->is_object())
        return malformed("pre_tokenizer Split has no pattern object");
      auto regex = pattern->find("Regex");
      if (regex == pattern->end() || pattern->size() != 1 ||
          !regex->is_string())
        return refuse(
            "pre_tokenizer Split pattern other than {\"Regex\": ...}");
      auto behavior = step->find("behavior");
      const std::string b = behavior != step->end() && behavior->is_string()
                                ? behavior->get<std::string>()
                                : "";
      if (b != "Isolated")
        return refuse("pre_tokenizer Split behavior '" + b + "'");
      if (status s = require_flag(*step, "invert", false, false,
                                  "pre_tokenizer Split");
          !s)
        return s;
      expected<split_regex> re =
          split_regex::compile(regex->get<std::string>());
      if (!re) return re.err();
      t.splits.push_back(std::move(*re));
    } else if (type == "ByteLevel") {
      if (status s = only_keys(
              *step, {"type", "add_prefix_space", "trim_offsets", "use_regex"},
              "pre_tokenizer ByteLevel");
          !s)
        return s;
      if (step->find("add_prefix_space") == step->end())
        return malformed("pre_tokenizer ByteLevel has no add_prefix_space");
      if (status s = require_flag(*step, "add_prefix_space", true, false,
                                  "pre_tokenizer ByteLevel");
          !s)
        return s;
      // HF's default for a missing use_regex is true.
      if (status s = require_flag(*step, "use_regex", true, false,
                                  "pre_tokenizer ByteLevel");
          !s)
        return s;
      byte_level = true;
    } else {
      return refuse("pre_tokenizer type '" + type + "'");
    }
  }
  if (!byte_level)
    return refuse(
        "a pre_tokenizer without ByteLevel (byte-level BPE needs it)");
  // The pipeline would run any number of Splits in turn, as HF does, but
  // only one is checked against a reference: refused until one is.
  if (t.splits.size() != 1)
    return refuse("a pre_tokenizer with " + std::to_string(t.splits.size()) +
                  " Splits (one is)");
  return ok;
}

status read_template(const json& p, impl& t) {
  if (status s = only_keys(p, {"type", "single", "pair", "special_tokens"},
                           "post_processor TemplateProcessing");
      !s)
    return s;
  if (t.has_template)
    return refuse("post_processor with two TemplateProcessing");
  auto single = p.find("single");
  if (single == p.end() || !single->is_array())
    return malformed("TemplateProcessing has no single array");
  auto specials = p.find("special_tokens");
  bool seen_a = false;
  for (const json& piece : *single) {
    if (!piece.is_object() || piece.size() != 1)
      return malformed("a TemplateProcessing piece is not a one-field object");
    if (auto seq = piece.find("Sequence"); seq != piece.end()) {
      auto id = seq->find("id");
      if (id == seq->end() || *id != "A" || seen_a)
        return refuse(
            "TemplateProcessing single template other than one "
            "Sequence A");
      seen_a = true;
      continue;
    }
    auto sp = piece.find("SpecialToken");
    if (sp == piece.end())
      return refuse("TemplateProcessing piece '" + piece.begin().key() + "'");
    auto name = sp->find("id");
    if (name == sp->end() || !name->is_string())
      return malformed("TemplateProcessing SpecialToken has no id");
    const std::string n = name->get<std::string>();
    if (specials == p.end() || !specials->is_object() || !specials->contains(n))
      return malformed("TemplateProcessing special token '" + n +
                       "' is not in special_tokens");
    const json& entry = (*specials)[n];
    auto ids = entry.find("ids");
    if (ids == entry.end() || !ids->is_array())
      return malformed("TemplateProcessing special token '" + n +
                       "' has no ids");
    for (const json& v : *ids) {
      expected<uint32_t> id =
          id_value(v, "TemplateProcessing id of '" + n + "'");
      if (!id) return id.err();
      (seen_a ? t.suffix : t.prefix).push_back(*id);
    }
    (seen_a ? t.suffix_names : t.prefix_names).push_back(n);
  }
  if (!seen_a)
    return refuse("TemplateProcessing single template without Sequence A");
  t.has_template = true;
  return ok;
}

status read_post_processor(const json& p, impl& t, bool nested) {
  if (!p.is_object()) return malformed("post_processor is not an object");
  const std::string type = type_of(p);
  if (type == "ByteLevel") {
    // Offsets only: the ids are the sequence's.
    return only_keys(p,
                     {"type", "add_prefix_space", "trim_offsets", "use_regex"},
                     "post_processor ByteLevel");
  }
  if (type == "TemplateProcessing") return read_template(p, t);
  if (type == "Sequence" && !nested) {
    if (status s =
            only_keys(p, {"type", "processors"}, "post_processor Sequence");
        !s)
      return s;
    auto list = p.find("processors");
    if (list == p.end() || !list->is_array())
      return malformed("post_processor Sequence has no processors array");
    for (const json& step : *list)
      if (status s = read_post_processor(step, t, true); !s) return s;
    return ok;
  }
  return refuse("post_processor type '" + type + "'");
}

std::string guess_family(const impl& t) {
  auto has = [&](const char* s) { return t.ids.count(s) > 0; };
  if (has("<|begin_of_text|>") && has("<|eot_id|>")) return "Llama 3";
  if (has("<|im_start|>") && has("<|endoftext|>")) return "Qwen 2";
  return "byte-level BPE";
}

}  // namespace

expected<tokenizer> tokenizer::from_json(std::string_view text) {
  if (!json_depth_within(text))
    return malformed("nests deeper than " + std::to_string(max_json_depth));
  json root = json::parse(text.begin(), text.end(), nullptr, false);
  if (root.is_discarded()) return malformed("is not valid JSON");
  if (!root.is_object()) return malformed("is not a JSON object");
  if (status s = only_keys(
          root,
          {"version", "truncation", "padding", "added_tokens", "normalizer",
           "pre_tokenizer", "post_processor", "decoder", "model"},
          "the top level");
      !s)
    return s.err();
  if (auto v = root.find("version");
      v != root.end() && !(v->is_string() && *v == "1.0"))
    return refuse("version " + json_shown(*v));
  if (!is_null(root, "truncation")) return refuse("truncation");
  if (!is_null(root, "padding")) return refuse("padding");
  auto t = std::make_shared<impl>();
  auto m = root.find("model");
  if (m == root.end()) return malformed("has no model");
  expected<bpe_model> model = read_model(*m, *t);
  if (!model) return model.err();
  t->model = std::move(*model);
  if (status s = read_added_tokens(root, *t); !s) return s.err();
  if (status s = read_normalizer(root, *t); !s) return s.err();
  if (status s = read_pre_tokenizer(root, *t); !s) return s.err();
  if (auto p = root.find("post_processor"); p != root.end() && !p->is_null())
    if (status s = read_post_processor(*p, *t, false); !s) return s.err();
  t->family = guess_family(*t);
  tokenizer r;
  r.impl_ = std::move(t);
  return r;
}

expected<tokenizer> tokenizer::load(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return make_error(ec::io_error, "tokenizer: cannot open " + path);
  std::ostringstream buf;
  buf << in.rdbuf();
  if (in.bad())
    return make_error(ec::io_error, "tokenizer: cannot read " + path);
  expected<tokenizer> t = from_json(buf.str());
  if (!t) return make_error(t.err().code, path + ": " + t.err().message);
  return t;
}

status tokenizer::encode(std::string_view text, bool add_special_tokens,
                         std::vector<uint32_t>& out) const {
  return impl_->encode(text, add_special_tokens, out);
}

std::optional<uint32_t> tokenizer::token_id(std::string_view token) const {
  auto it = impl_->ids.find(std::string(token));
  if (it == impl_->ids.end()) return std::nullopt;
  return it->second;
}

bool tokenizer::is_added(std::string_view token) const {
  uint32_t id = 0;
  return !token.empty() && impl_->match(token, 0, &id) == token.size();
}

std::string tokenizer::describe() const {
  const impl& t = *impl_;
  std::string s = t.family + " tokenizer: byte-level BPE, " +
                  std::to_string(t.vocab_size) + " tokens, " +
                  std::to_string(t.model.merge_count()) + " merges";
  if (t.model.ignore_merges()) s += " (ignore_merges)";
  s += ", " + std::to_string(t.added) + " added tokens (" +
       std::to_string(t.special) + " special), normalizer " +
       (t.nfc ? "NFC" : "none");
  s += ", " + std::to_string(t.splits.size()) +
       " Split regex (PCRE2, Unicode " + split_regex::unicode_version() + ")";
  if (t.has_template && !(t.prefix_names.empty() && t.suffix_names.empty())) {
    s += ", adds";
    for (const auto& n : t.prefix_names)
      s += " " + n;
    s += " before";
    if (!t.suffix_names.empty()) {
      s += " and";
      for (const auto& n : t.suffix_names)
        s += " " + n;
      s += " after";
    }
    s += " the text";
  } else {
    s += ", adds no special tokens";
  }
  return s;
}

}  // namespace kvmesh
