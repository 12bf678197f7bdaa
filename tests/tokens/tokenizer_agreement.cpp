// The agreement check: kvmesh's tokenizer against the ids Hugging Face's JS
// tokenizers gave (tokenizer_reference.mjs), every string, both modes.
// usage: kvmesh_tokenizer_agreement DIR NAME...
//   reads DIR/NAME.tokenizer.json and DIR/NAME.jsonl; prints, per model, the
//   count that agree and the first mismatch (text escaped, both id lists),
//   and the encode speed over the corpus; exits 1 unless all agree.
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tokens/tokenizer.hpp"

namespace {

using ids = std::vector<uint32_t>;

std::string show(const ids& v, size_t around) {
  // Long lists: the ids near the first difference.
  const size_t from = around > 8 ? around - 8 : 0;
  const size_t to = std::min(v.size(), around + 8);
  std::string s = "(" + std::to_string(v.size()) + " ids) [";
  if (from > 0) s += "... ";
  for (size_t i = from; i < to; ++i) {
    if (i > from) s += ", ";
    if (i == around) s += ">";
    s += std::to_string(v[i]);
  }
  if (to < v.size()) s += " ...";
  return s + "]";
}

std::string escaped(const std::string& text) {
  std::string s = nlohmann::json(text).dump();
  if (s.size() > 600)
    s = s.substr(0, 600) + "... (" + std::to_string(text.size()) + " bytes)";
  return s;
}

bool check(const std::string& dir, const std::string& name) {
  auto t = kvmesh::tokenizer::load(dir + "/" + name + ".tokenizer.json");
  if (!t) {
    std::cout << name << ": FAIL load: " << t.err().message << "\n";
    return false;
  }
  std::cout << name << ": " << t->describe() << "\n";
  std::ifstream in(dir + "/" + name + ".jsonl");
  if (!in) {
    std::cout << name << ": FAIL cannot read " << name << ".jsonl\n";
    return false;
  }
  size_t lines = 0, agree = 0, bytes = 0, tokens = 0;
  double seconds = 0;
  bool shown = false;
  std::string line;
  ids got;
  while (std::getline(in, line)) {
    ++lines;
    const nlohmann::json j = nlohmann::json::parse(line);
    const std::string text = j["text"].get<std::string>();
    bool ok = true;
    for (bool special : {true, false}) {
      const ids want = j[special ? "special" : "plain"].get<ids>();
      const auto start = std::chrono::steady_clock::now();
      kvmesh::status s = t->encode(text, special, got);
      const auto stop = std::chrono::steady_clock::now();
      if (!special) {
        seconds += std::chrono::duration<double>(stop - start).count();
        bytes += text.size();
        tokens += got.size();
      }
      if (s && got == want) continue;
      ok = false;
      if (shown) break;
      shown = true;
      size_t at = 0;
      while (at < want.size() && at < got.size() && want[at] == got[at])
        ++at;
      std::cout << name << ": FIRST MISMATCH at line " << lines
                << " (add_special_tokens " << (special ? "true" : "false")
                << ")\n  text: " << escaped(text)
                << "\n  want: " << show(want, at) << "\n  got:  "
                << (s ? show(got, at) : "error: " + s.err().message) << "\n";
      break;
    }
    if (ok) ++agree;
  }
  const bool all = lines > 0 && agree == lines;
  std::cout << name << ": " << agree << "/" << lines
            << " strings agree token for token (add_special_tokens true and "
               "false) "
            << (all ? "PASS" : "FAIL") << "\n";
  if (seconds > 0)
    std::printf(
        "%s: encode speed %.2f MB/s, %.0f tokens/s (%zu bytes, %zu "
        "tokens in %.3f s, one thread)\n",
        name.c_str(), bytes / seconds / 1e6, tokens / seconds, bytes, tokens,
        seconds);
  std::fflush(stdout);
  return all;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::cerr << "usage: kvmesh_tokenizer_agreement DIR NAME...\n";
    return 2;
  }
  bool all = true;
  for (int i = 2; i < argc; ++i)
    all = check(argv[1], argv[i]) && all;
  return all ? 0 : 1;
}
