// The config file without CLI11: key names, the TOML reader, TOML values.
// Keys and variables are named from flags; a file is checked against the
// key table, every problem with its line.
#include <toml++/toml.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>

#include "cli/config.hpp"
#include "cli/config_detail.hpp"
#include "core/log.hpp"

namespace kvmesh::cli {

using namespace config_detail;

namespace {

// TOML basic strings take JSON's escapes, and must be UTF-8 as well.
std::string toml_quote(const std::string& s) {
  return "\"" + log::json_escape(s) + "\"";
}

// The shortest text that reads back as `v`; whole numbers in full (3600,
// not 3.6e+03).
std::string shortest(double v) {
  char buf[40];
  if (std::isfinite(v) && v == std::floor(v) && std::fabs(v) < 1e15) {
    std::snprintf(buf, sizeof(buf), "%.0f", v);
    return buf;
  }
  for (int p = 1; p <= 17; ++p) {
    std::snprintf(buf, sizeof(buf), "%.*g", p, v);
    if (std::strtod(buf, nullptr) == v) break;
  }
  return buf;
}

const char* got_of(const toml::node& v) {
  switch (v.type()) {
    case toml::node_type::string:
      return "a string";
    case toml::node_type::integer:
      return "an integer";
    case toml::node_type::floating_point:
      return "a float";
    case toml::node_type::boolean:
      return "a boolean";
    case toml::node_type::array:
      return "an array";
    case toml::node_type::table:
      return "a table";
    case toml::node_type::date:
      return "a date";
    case toml::node_type::time:
      return "a time";
    case toml::node_type::date_time:
      return "a date-time";
    default:
      return "nothing";
  }
}

// One TOML scalar as a flag's text; "" when fine, else what is wrong.
std::string scalar_text(const key_spec& k, const toml::node& v,
                        std::string& text, std::string& shown) {
  const auto wrong = [&] {
    return std::string("want ") + want_of(k.kind) + ", got " + got_of(v);
  };
  switch (k.kind) {
    case value_kind::boolean:
      if (auto b = v.as_boolean()) {
        text = shown = b->get() ? "true" : "false";
        return {};
      }
      return wrong();
    case value_kind::integer:
    case value_kind::unsigned_integer:
      if (auto i = v.as_integer()) {
        text = shown = std::to_string(i->get());
        if (k.kind == value_kind::unsigned_integer && i->get() < 0)
          return "want an integer >= 0, got " + shown;
        return {};
      }
      return wrong();
    case value_kind::floating:
      if (auto i = v.as_integer()) {
        // As the number it becomes: an integer past 2^53 has no double of
        // its own, and its digits would not read back as written.
        text = shown = shortest(static_cast<double>(i->get()));
        return {};
      }
      if (auto f = v.as_floating_point()) {
        text = shown = shortest(f->get());
        if (!std::isfinite(f->get())) return "want a finite number";
        return {};
      }
      return wrong();
    case value_kind::text:
      if (auto s = v.as_string()) {
        text = s->get();
        shown = toml_quote(text);
        return {};
      }
      return wrong();
  }
  return wrong();
}

size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j)
    row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min(
          {row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

std::string nearest_of(const std::string& word,
                       const std::vector<std::string>& known) {
  std::string best;
  size_t best_d = std::max<size_t>(2, word.size() / 3) + 1;
  for (const auto& k : known) {
    const size_t d = edit_distance(word, k);
    if (d < best_d) {
      best_d = d;
      best = k;
    }
  }
  return best;
}

}  // namespace

namespace config_detail {

const char* want_of(value_kind k) {
  switch (k) {
    case value_kind::boolean:
      return "true or false";
    case value_kind::integer:
      return "an integer";
    case value_kind::unsigned_integer:
      return "an integer >= 0";
    case value_kind::floating:
      return "a number";
    case value_kind::text:
      return "a string";
  }
  return "a value";
}

std::string section_of(const std::string& key) {
  return key.substr(0, key.find('.'));
}

std::string join(const std::vector<std::string>& items, const char* sep) {
  std::string out;
  for (const auto& s : items)
    out += (out.empty() ? "" : sep) + s;
  return out;
}

std::string errors_text(std::vector<std::pair<size_t, std::string>> errors,
                        const std::string& prefix) {
  std::stable_sort(
      errors.begin(), errors.end(),
      [](const auto& a, const auto& b) { return a.first < b.first; });
  std::string out;
  for (const auto& [line, msg] : errors)
    out += (out.empty() ? "" : "\n") + prefix + msg;
  return out;
}

}  // namespace config_detail

std::string key_of(const std::string& section, const std::string& long_name) {
  std::string name = long_name;
  std::replace(name.begin(), name.end(), '-', '_');
  return section + "." + name;
}

std::string env_of(const std::string& key) {
  std::string out = "KVMESH_";
  for (char c : key)
    out += c == '.' || c == '-'
               ? '_'
               : static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return out;
}

std::string nearest_key(const std::string& key,
                        const std::vector<key_spec>& keys) {
  std::vector<std::string> known;
  for (const auto& k : keys)
    known.push_back(k.key);
  return nearest_of(key, known);
}

expected<file_values> read_config(std::string_view text,
                                  const std::string& path,
                                  const std::vector<key_spec>& keys) {
  toml::table root;
  try {
    root = toml::parse(text, path);
  } catch (const toml::parse_error& e) {
    const auto& at = e.source().begin;
    return make_error(ec::parse_error,
                      path + ":" + std::to_string(at.line) + ":" +
                          std::to_string(at.column) +
                          ": not TOML: " + std::string(e.description()));
  }
  std::map<std::string, const key_spec*> by_key;
  std::vector<std::string> sections;
  for (const auto& k : keys) {
    by_key[k.key] = &k;
    const std::string s = section_of(k.key);
    if (std::find(sections.begin(), sections.end(), s) == sections.end())
      sections.push_back(s);
  }
  std::vector<std::pair<size_t, std::string>> errors;
  const auto fail = [&](size_t line, const std::string& msg) {
    errors.emplace_back(line, path + ":" + std::to_string(line) + ": " + msg);
  };
  file_values out;
  for (auto&& [sk, sv] : root) {
    const std::string section(sk.str());
    const size_t sline = static_cast<size_t>(sk.source().begin.line);
    const bool known =
        std::find(sections.begin(), sections.end(), section) != sections.end();
    if (!sv.is_table()) {
      fail(sline, "key '" + section +
                      "' is outside any section: keys belong in [" +
                      join(sections, "], [") + "]");
      continue;
    }
    if (!known) {
      const std::string near = nearest_of(section, sections);
      fail(sline, "unknown section [" + section + "]" +
                      (near.empty() ? "" : " (did you mean [" + near + "]?)") +
                      "; sections: " + join(sections, ", "));
      continue;
    }
    for (auto&& [kk, v] : *sv.as_table()) {
      const std::string key = section + "." + std::string(kk.str());
      const size_t line = static_cast<size_t>(kk.source().begin.line);
      auto spec = by_key.find(key);
      if (spec == by_key.end()) {
        const std::string near = nearest_key(key, keys);
        fail(line, "unknown key " + key +
                       (near.empty() ? "" : " (did you mean " + near + "?)") +
                       "; `kvmesh config show` lists every key");
        continue;
      }
      const key_spec& k = *spec->second;
      file_value fv;
      fv.line = line;
      std::string why;
      if (k.list) {
        if (auto arr = v.as_array()) {
          std::vector<std::string> shown;
          for (auto&& item : *arr) {
            std::string t, s;
            why = scalar_text(k, item, t, s);
            if (!why.empty()) break;
            fv.texts.push_back(t);
            shown.push_back(s);
          }
          fv.shown = "[" + join(shown, ", ") + "]";
        } else {
          why = std::string("want an array of ") + want_of(k.kind) + ", got " +
                got_of(v);
        }
      } else {
        std::string t;
        why = scalar_text(k, v, t, fv.shown);
        fv.texts.push_back(t);
      }
      if (!why.empty()) {
        fail(line, key + ": " + why);
        continue;
      }
      out[key] = std::move(fv);
    }
  }
  if (!errors.empty())
    return make_error(ec::parse_error, errors_text(std::move(errors), ""));
  return out;
}

expected<file_values> load_config(const std::string& path,
                                  const std::vector<key_spec>& keys) {
  std::ifstream in(path, std::ios::binary);
  if (!in)
    return make_error(ec::io_error, path + ": cannot read the config file: " +
                                        std::strerror(errno) +
                                        " (check the path given by --config or "
                                        "KVMESH_CONFIG)");
  std::ostringstream text;
  text << in.rdbuf();
  return read_config(text.str(), path, keys);
}

std::vector<std::string> default_texts(const key_spec& k) {
  const std::string& d = k.default_text;
  if (!k.list) return {d};
  if (d.size() < 2 || d.front() != '[' || d.back() != ']')
    return d.empty() ? std::vector<std::string>{} : std::vector<std::string>{d};
  std::vector<std::string> items;
  const std::string in = d.substr(1, d.size() - 2);
  size_t at = 0;
  while (!in.empty() && at <= in.size()) {
    const size_t comma = std::min(in.find(',', at), in.size());
    items.push_back(in.substr(at, comma - at));
    at = comma + 1;
  }
  return items;
}

std::string toml_value(const key_spec& k,
                       const std::vector<std::string>& texts) {
  std::vector<std::string> items;
  for (const auto& t : texts) {
    switch (k.kind) {
      case value_kind::boolean: {
        std::string l = t;
        for (auto& ch : l)
          ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
        const bool on = l == "true" || l == "1" || l == "on" || l == "yes" ||
                        l == "y" || l == "t" || l == "+" || l == "enable";
        items.push_back(on ? "true" : "false");
        break;
      }
      case value_kind::integer:
      case value_kind::unsigned_integer:
        items.push_back(t);
        break;
      case value_kind::floating: {
        char* end = nullptr;
        const double v = std::strtod(t.c_str(), &end);
        std::string s = end && *end == '\0' ? shortest(v) : t;
        if (std::isfinite(v) && s.find_first_of(".eE") == std::string::npos)
          s += ".0";  // a TOML float, not an integer
        items.push_back(s);
        break;
      }
      case value_kind::text:
        items.push_back(toml_quote(t));
        break;
    }
  }
  if (k.list) return "[" + join(items, ", ") + "]";
  return items.empty() ? std::string() : items.front();
}

}  // namespace kvmesh::cli
