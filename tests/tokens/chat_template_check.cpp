// Chat template check: renders the reference's conversations
// (chat_template_reference.mjs, @huggingface/jinja; optionally Python's
// Jinja2 from chat_template_python.py) with kvmesh's renderer and requires
// byte-for-byte agreement, printing the first mismatch.
//
// usage: chat_template_check REF.jsonl [PYTHON.jsonl]
// Exit 0 if every conversation agrees (the same text, or both raise).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tokens/chat_template.hpp"

namespace {

using ojson = nlohmann::ordered_json;

std::string escaped(const std::string& s, size_t from, size_t to) {
  std::string out;
  for (size_t i = from; i < to && i < s.size(); ++i) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    switch (c) {
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '"':
        out += "\\\"";
        break;
      default:
        if (c < 0x20 || c == 0x7f) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\x%02x", c);
          out += buf;
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  return out;
}

struct tally {
  size_t total = 0, agree = 0, both_raise = 0;
  double seconds = 0;
};

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::cerr << "usage: chat_template_check REF.jsonl [PYTHON.jsonl]\n";
    return 2;
  }
  std::ifstream ref(argv[1]);
  if (!ref) {
    std::cerr << "cannot read " << argv[1] << "\n";
    return 2;
  }
  std::ifstream py;
  if (argc > 2) {
    py.open(argv[2]);
    if (!py) {
      std::cerr << "cannot read " << argv[2] << "\n";
      return 2;
    }
  }
  std::string line;
  std::getline(ref, line);
  ojson header = ojson::parse(line);
  kvmesh::chat_template_render_options opts;
  opts.now = std::chrono::system_clock::time_point(
      std::chrono::seconds(header["now"].get<int64_t>()));
  std::map<std::string, kvmesh::chat_template> templates;
  for (auto& [name, source] : header["templates"].items()) {
    auto t = kvmesh::chat_template::parse(source.get<std::string>());
    if (!t) {
      std::cerr << "template " << name << " does not parse: " << t.err().message
                << "\n";
      return 1;
    }
    templates.emplace(name, std::move(*t));
  }
  std::map<std::string, tally> tallies;
  std::vector<double> micros;  // every render's time
  size_t failures = 0, number = 1;
  auto report = [&](const char* who, const std::string& name, size_t n,
                    const std::string& want, bool want_raise,
                    const kvmesh::expected<std::string>& got) {
    ++failures;
    if (failures > 1) return;
    std::cout << "FIRST MISMATCH with " << who << ": template " << name
              << ", line " << n << " of the reference\n";
    if (want_raise) {
      std::cout << "  " << who << " raises: " << want << "\n  kvmesh renders ("
                << got->size() << " bytes): \"" << escaped(*got, 0, 4000)
                << "\"\n";
      return;
    }
    if (!got) {
      std::cout << "  kvmesh raises: " << got.err().message << "\n  " << who
                << " renders (" << want.size() << " bytes): \""
                << escaped(want, 0, 4000) << "\"\n";
      return;
    }
    size_t at = 0;
    while (at < want.size() && at < got->size() && want[at] == (*got)[at])
      ++at;
    size_t from = at > 300 ? at - 300 : 0;
    std::cout << "  first differing byte offset " << at << " (" << who << " "
              << want.size() << " bytes, kvmesh " << got->size()
              << " bytes); from offset " << from << ":\n"
              << "  " << who << ": \"" << escaped(want, from, at + 300)
              << "\"\n  kvmesh: \"" << escaped(*got, from, at + 300) << "\"\n";
  };
  while (std::getline(ref, line)) {
    ++number;
    ojson rec = ojson::parse(line);
    std::string name = rec["template"].get<std::string>();
    tally& t = tallies[name];
    ++t.total;
    auto start = std::chrono::steady_clock::now();
    auto got = templates.at(name).render(rec["context"], opts);
    double took =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
            .count();
    t.seconds += took;
    micros.push_back(took * 1e6);
    bool ok = true;
    if (rec.contains("error")) {
      if (got) {
        report("@huggingface/jinja", name, number,
               rec["error"].get<std::string>(), true, got);
        ok = false;
      } else {
        ++t.both_raise;
      }
    } else {
      const std::string& want = rec["rendered"].get_ref<const std::string&>();
      if (!got || *got != want) {
        report("@huggingface/jinja", name, number, want, false, got);
        ok = false;
      }
    }
    if (py.is_open()) {
      std::string pl;
      if (!std::getline(py, pl)) {
        std::cerr << "the Python results end early\n";
        return 1;
      }
      ojson p = ojson::parse(pl);
      bool py_raise = p.contains("error");
      if (py_raise ? bool(got)
                   : (!got || *got != p["rendered"].get<std::string>())) {
        report("Python Jinja2", name, number,
               py_raise ? p["error"].get<std::string>()
                        : p["rendered"].get<std::string>(),
               py_raise, got);
        ok = false;
      }
    }
    if (ok) ++t.agree;
  }
  size_t total = 0, agree = 0;
  double seconds = 0;
  for (auto& [name, t] : tallies) {
    std::printf(
        "%-16s %6zu conversations, %6zu agree (%zu both raise), %.1f us "
        "per render\n",
        name.c_str(), t.total, t.agree, t.both_raise,
        t.total ? t.seconds * 1e6 / static_cast<double>(t.total) : 0.0);
    total += t.total;
    agree += t.agree;
    seconds += t.seconds;
  }
  std::printf(
      "all: %zu conversations, %zu agree byte for byte%s, %.1f us per "
      "render\n",
      total, agree, py.is_open() ? " with both references" : "",
      total ? seconds * 1e6 / static_cast<double>(total) : 0.0);
  if (!micros.empty()) {
    std::sort(micros.begin(), micros.end());
    std::printf(
        "render time per conversation: median %.1f us, p99 %.1f us, "
        "max %.1f us\n",
        micros[micros.size() / 2], micros[micros.size() * 99 / 100],
        micros.back());
  }
  std::printf("%zu passed, %zu failed\n", agree, total - agree);
  return failures == 0 && total > 0 ? 0 : 1;
}
