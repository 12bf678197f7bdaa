// Fuzzes the config file reader (TOML, checked against the key table): a
// file that reads, written back key by key with toml_value, reads back to
// the same values.
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "cli/config.hpp"
#include "tests/fuzz/check.hpp"

namespace kvmesh::cli {
namespace {

key_spec key(const char* name, value_kind kind, bool list = false) {
  key_spec k;
  k.key = name;
  k.env = env_of(name);
  k.kind = kind;
  k.list = list;
  return k;
}

// Every kind of value, alone and as a list, in two sections; the real
// table comes from the commands' flags, which this target does not build.
const std::vector<key_spec>& keys() {
  static const std::vector<key_spec> table{
      key("router.fanout", value_kind::unsigned_integer),
      key("router.seed", value_kind::integer),
      key("router.beta", value_kind::floating),
      key("router.durable", value_kind::boolean),
      key("router.name", value_kind::text),
      key("nats.url", value_kind::text),
      key("agent.gpu_blocks", value_kind::unsigned_integer, true),
      key("agent.offsets", value_kind::integer, true),
      key("agent.speed", value_kind::floating, true),
      key("agent.flags", value_kind::boolean, true),
      key("agent.names", value_kind::text, true)};
  return table;
}

}  // namespace
}  // namespace kvmesh::cli

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace kvmesh::cli;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto v = read_config(text, "fuzz.toml", keys());
  if (!v) {
    FUZZ_CHECK(v.err().message.rfind("fuzz.toml:", 0) == 0,
               "the error names the file and line");
    return 0;
  }
  // TOML defines a table once: one header per section, its keys below.
  std::map<std::string, std::string> sections;
  for (const auto& [name, value] : *v) {
    const key_spec* k = nullptr;
    for (const auto& s : keys())
      if (s.key == name) k = &s;
    FUZZ_CHECK(k != nullptr, "only known keys are read");
    const size_t dot = name.find('.');
    sections[name.substr(0, dot)] +=
        name.substr(dot + 1) + " = " + toml_value(*k, value.texts) + "\n";
  }
  std::string again;
  for (const auto& [section, lines] : sections)
    again += "[" + section + "]\n" + lines;
  auto w = read_config(again, "again.toml", keys());
  FUZZ_CHECK(static_cast<bool>(w), "the values written back read");
  FUZZ_CHECK(w->size() == v->size(), "every key reads back");
  for (const auto& [name, value] : *v)
    FUZZ_CHECK(w->at(name).texts == value.texts, "every value reads back");
  return 0;
}
