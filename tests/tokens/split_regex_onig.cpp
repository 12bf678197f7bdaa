// The Split regexes as HF tokenizers itself runs them: Oniguruma (Debian's
// libonig 6.9.8, the version HF's onig crate builds) against kvmesh's PCRE2
// rewrite (tokens/split_regex), match for match, over every code point in
// several contexts and over the texts of the reference corpora.
// usage: kvmesh_split_regex_onig TOKENIZER_JSON [CORPUS_JSONL...]
#include <oniguruma.h>

#include <cstdio>
#include <fstream>
#include <iostream>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "tokens/split_regex.hpp"

namespace {

using matches = std::vector<std::pair<size_t, size_t>>;

void utf8(uint32_t cp, std::string& s) {
  if (cp < 0x80) {
    s += static_cast<char>(cp);
  } else if (cp < 0x800) {
    s += static_cast<char>(0xC0 | (cp >> 6));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    s += static_cast<char>(0xE0 | (cp >> 12));
    s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    s += static_cast<char>(0xF0 | (cp >> 18));
    s += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

struct onig {
  regex_t* reg = nullptr;
  OnigRegion* region = onig_region_new();
  explicit onig(const std::string& p) {
    OnigErrorInfo info;
    const auto* b = reinterpret_cast<const OnigUChar*>(p.data());
    int r = onig_new(&reg, b, b + p.size(), ONIG_OPTION_NONE,
                     ONIG_ENCODING_UTF8, ONIG_SYNTAX_DEFAULT, &info);
    if (r != ONIG_NORMAL) {
      std::cerr << "Oniguruma does not compile the pattern\n";
      std::exit(1);
    }
  }
  // onig crate's find_iter: from the end of each match (none is empty).
  matches all(const std::string& s) const {
    matches m;
    const auto* b = reinterpret_cast<const OnigUChar*>(s.data());
    const OnigUChar* e = b + s.size();
    size_t at = 0;
    while (at < s.size()) {
      int r = onig_search(reg, b, e, b + at, e, region, ONIG_OPTION_NONE);
      if (r < 0) break;
      m.emplace_back(region->beg[0], region->end[0]);
      at = region->end[0] > region->beg[0] ? region->end[0] : at + 1;
    }
    return m;
  }
};

matches all(const kvmesh::split_regex& re, const std::string& s) {
  matches m;
  size_t at = 0, b = 0, e = 0;
  while (at < s.size()) {
    auto found = re.find(s, at, &b, &e);
    if (!found) {
      std::cerr << "PCRE2: " << found.err().message << "\n";
      std::exit(1);
    }
    if (!*found) break;
    m.emplace_back(b, e);
    at = e;
  }
  return m;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::cerr << "usage: kvmesh_split_regex_onig TOKENIZER_JSON [JSONL...]\n";
    return 2;
  }
  OnigEncoding encodings[] = {ONIG_ENCODING_UTF8};
  onig_initialize(encodings, 1);
  std::ifstream in(argv[1]);
  const nlohmann::json t = nlohmann::json::parse(in);
  std::vector<std::string> patterns;
  for (const auto& step : t["pre_tokenizer"]["pretokenizers"])
    if (step["type"] == "Split")
      patterns.push_back(step["pattern"]["Regex"].get<std::string>());
  int failures = 0;
  for (const std::string& p : patterns) {
    const onig o(p);
    auto re = kvmesh::split_regex::compile(p);
    if (!re) {
      std::cerr << re.err().message << "\n";
      return 1;
    }
    size_t checked = 0;
    auto same = [&](const std::string& s) {
      ++checked;
      const matches want = o.all(s), got = all(*re, s);
      if (want == got) return;
      if (++failures > 3) return;
      size_t i = 0;
      while (i < want.size() && i < got.size() && want[i] == got[i])
        ++i;
      auto at = [&](const matches& m) {
        return i < m.size() ? "[" + std::to_string(m[i].first) + ", " +
                                  std::to_string(m[i].second) + ")"
                            : std::string("none");
      };
      std::string text = nlohmann::json(s).dump();
      if (text.size() > 300) text = text.substr(0, 300) + "...";
      std::cout << "MISMATCH on " << text << "\n  match " << i << ": Oniguruma "
                << at(want) << ", PCRE2 " << at(got) << "\n";
    };
    // Every code point (surrogates aside) alone and beside letters, digits,
    // spaces, an apostrophe and itself.
    for (uint32_t cp = 0; cp <= 0x10FFFF; ++cp) {
      if (cp >= 0xD800 && cp <= 0xDFFF) continue;
      std::string c;
      utf8(cp, c);
      same(c + "a" + c + " " + c + c + "1 " + c + "'" + c + "\n " + c + "  x" +
           c);
    }
    for (int i = 2; i < argc; ++i) {
      std::ifstream lines(argv[i]);
      std::string line;
      while (std::getline(lines, line))
        same(nlohmann::json::parse(line)["text"].get<std::string>());
    }
    std::cout << "split regex, Oniguruma against PCRE2: " << checked
              << " strings, " << failures << " differ\n";
  }
  return failures == 0 ? 0 : 1;
}
