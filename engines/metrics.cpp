// Prometheus text format (version 0.0.4) and the engines' load gauges.
#include "engines/metrics.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>

namespace kvmesh {

const std::string* prom_sample::label(std::string_view key) const {
  for (const auto& [k, v] : labels)
    if (k == key) return &v;
  return nullptr;
}

namespace {

bool name_char(char c, bool first) {
  return std::isalpha(static_cast<unsigned char>(c)) || c == '_' || c == ':' ||
         (!first && std::isdigit(static_cast<unsigned char>(c)));
}

// Parses `{a="x",b="y"}` at s[i]; advances i past it.
bool parse_labels(std::string_view s, size_t& i, prom_sample& out) {
  ++i;  // '{'
  while (true) {
    while (i < s.size() && (s[i] == ' ' || s[i] == ','))
      ++i;
    if (i < s.size() && s[i] == '}') {
      ++i;
      return true;
    }
    const size_t start = i;
    while (i < s.size() && name_char(s[i], i == start))
      ++i;
    if (i == start || i >= s.size() || s[i] != '=') return false;
    std::string key(s.substr(start, i - start));
    ++i;
    if (i >= s.size() || s[i] != '"') return false;
    ++i;
    std::string val;
    while (i < s.size() && s[i] != '"') {
      if (s[i] == '\\' && i + 1 < s.size()) {
        ++i;
        val += s[i] == 'n' ? '\n' : s[i];
      } else {
        val += s[i];
      }
      ++i;
    }
    if (i >= s.size()) return false;
    ++i;  // closing quote
    out.labels.emplace_back(std::move(key), std::move(val));
  }
}

bool parse_line(std::string_view line, prom_sample& out) {
  size_t i = 0;
  while (i < line.size() && name_char(line[i], i == 0))
    ++i;
  if (i == 0) return false;
  out.name = std::string(line.substr(0, i));
  if (i < line.size() && line[i] == '{' && !parse_labels(line, i, out))
    return false;
  while (i < line.size() && line[i] == ' ')
    ++i;
  const size_t end = line.find(' ', i);
  const std::string num(line.substr(
      i, end == std::string_view::npos ? std::string_view::npos : end - i));
  if (num.empty()) return false;
  char* stop = nullptr;
  out.value = std::strtod(num.c_str(), &stop);
  return stop && *stop == '\0';
}

// Whether a sample is about `rank`: unlabelled ones are about every rank.
bool of_rank(const prom_sample& s, int rank) {
  for (const char* key : {"engine", "dp_rank"})
    if (const std::string* v = s.label(key)) {
      char* stop = nullptr;
      const long r = std::strtol(v->c_str(), &stop, 10);
      if (stop && *stop == '\0' && !v->empty()) return r == rank;
    }
  return true;
}

}  // namespace

std::vector<prom_sample> parse_prometheus(std::string_view text, size_t* bad) {
  std::vector<prom_sample> out;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t nl = text.find('\n', pos);
    if (nl == std::string_view::npos) nl = text.size();
    std::string_view line = text.substr(pos, nl - pos);
    pos = nl + 1;
    while (!line.empty() && (line.back() == '\r' || line.back() == ' '))
      line.remove_suffix(1);
    while (!line.empty() && line.front() == ' ')
      line.remove_prefix(1);
    if (line.empty() || line.front() == '#') continue;
    prom_sample s;
    if (parse_line(line, s))
      out.push_back(std::move(s));
    else if (bad)
      ++*bad;
  }
  return out;
}

engine_metrics engine_metrics_of(const std::vector<prom_sample>& samples,
                                 int rank, uint32_t block_tokens) {
  engine_metrics m;
  bool usage_new = false;  // vllm:kv_cache_usage_perc seen: it wins
  for (const auto& s : samples) {
    if (!of_rank(s, rank) || !std::isfinite(s.value)) continue;
    const std::string& n = s.name;
    if (n == "vllm:num_requests_waiting" || n == "sglang:num_queue_reqs") {
      m.waiting += s.value;
      m.has_metrics = true;
    } else if (n == "vllm:num_requests_running" ||
               n == "sglang:num_running_reqs") {
      m.running += s.value;
      m.has_metrics = true;
    } else if (n == "vllm:kv_cache_usage_perc") {
      m.kv_usage = usage_new ? std::max(m.kv_usage, s.value) : s.value;
      usage_new = true;
      m.has_metrics = true;
    } else if ((n == "vllm:gpu_cache_usage_perc" ||
                n == "sglang:token_usage") &&
               !usage_new) {
      m.kv_usage = std::max(m.kv_usage, s.value);
      m.has_metrics = true;
    } else if (n == "vllm:cache_config_info") {
      if (const std::string* b = s.label("num_gpu_blocks")) {
        char* stop = nullptr;
        const unsigned long long v = std::strtoull(b->c_str(), &stop, 10);
        if (stop && *stop == '\0' && v > 0) m.gpu_blocks = v;
      }
    } else if (n == "sglang:max_total_num_tokens" && s.value > 0 &&
               block_tokens > 0 && m.gpu_blocks == 0) {
      m.gpu_blocks = static_cast<uint64_t>(s.value) / block_tokens;
    }
  }
  return m;
}

}  // namespace kvmesh
