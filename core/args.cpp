// The checks and parsers of the commands' values (core/args.hpp).
#include "core/args.hpp"

#include <cctype>
#include <cstdint>
#include <exception>
#include <string>

#include "core/block_hash.hpp"

namespace kvmesh {

status check_url(const std::string& url, size_t entry,
                 const std::string& text) {
  auto bad = [&](const std::string& why) {
    const std::string which =
        url == text ? "'" + url + "'"
                    : "entry " + std::to_string(entry) + " '" + url + "'";
    return make_error(ec::parse_error, "--nats: " + which + " " + why);
  };
  std::string rest = url;
  if (const size_t sep = rest.find("://"); sep != std::string::npos) {
    const std::string scheme = rest.substr(0, sep);
    if (scheme != "nats" && scheme != "tls")
      return bad("has scheme '" + scheme + "' (want nats:// or tls://)");
    rest = rest.substr(sep + 3);
  }
  if (const size_t at = rest.rfind('@'); at != std::string::npos)
    rest = rest.substr(at + 1);  // user and password: the server checks them
  if (rest.find_first_of(" \t/?#") != std::string::npos)
    return bad("is not [nats://]host[:port]");
  std::string host = rest, port;
  if (!rest.empty() && rest[0] == '[') {  // [IPv6]:port
    const size_t close = rest.find(']');
    if (close == std::string::npos)
      return bad("has no ']' after its IPv6 host");
    host = rest.substr(0, close + 1);
    if (close + 1 < rest.size()) {
      if (rest[close + 1] != ':') return bad("is not [nats://]host[:port]");
      port = rest.substr(close + 2);
      if (port.empty()) return bad("has an empty port");
    }
  } else if (const size_t colon = rest.rfind(':'); colon != std::string::npos) {
    host = rest.substr(0, colon);
    port = rest.substr(colon + 1);
    if (port.empty()) return bad("has an empty port");
  }
  if (host.empty() || host == "[]") return bad("has no host");
  if (!port.empty() &&
      (port.size() > 5 ||
       port.find_first_not_of("0123456789") != std::string::npos ||
       std::stoul(port) == 0 || std::stoul(port) > 65535))
    return bad("has port '" + port + "' (want 1 to 65535)");
  return ok;
}

expected<std::vector<std::string>> split_urls(const std::string& text) {
  std::vector<std::string> out;
  size_t pos = 0;
  while (true) {
    const size_t comma = text.find(',', pos);
    std::string url = text.substr(
        pos, comma == std::string::npos ? std::string::npos : comma - pos);
    const auto first = url.find_first_not_of(" \t");
    const auto last = url.find_last_not_of(" \t");
    url = first == std::string::npos ? "" : url.substr(first, last - first + 1);
    if (url.empty())
      return make_error(ec::parse_error, "--nats: entry " +
                                             std::to_string(out.size() + 1) +
                                             " of '" + text + "' is empty");
    if (auto st = check_url(url, out.size() + 1, text); !st) return st.err();
    out.push_back(std::move(url));
    if (comma == std::string::npos) return out;
    pos = comma + 1;
  }
}

std::string url_list(const std::string& text) {
  const auto urls = split_urls(text);
  std::string out;
  if (!urls) return out;
  for (const auto& url : *urls)
    out += (out.empty() ? "" : ",") + url;
  return out;
}

status check_prefix(const std::string& prefix) {
  auto bad = [&](const std::string& why) {
    return make_error(ec::invalid_argument,
                      "--prefix: '" + prefix + "' " + why);
  };
  if (prefix.empty()) return bad("is empty");
  size_t start = 0;
  while (true) {
    const size_t dot = prefix.find('.', start);
    const std::string token = prefix.substr(
        start, dot == std::string::npos ? std::string::npos : dot - start);
    if (token.empty()) return bad("has an empty subject token");
    for (char c : token)
      if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '-' ||
            c == '_'))
        return bad(std::string("holds '") + c +
                   "': subject tokens are letters, digits, '-' and '_', "
                   "separated by '.'");
    if (dot == std::string::npos) return ok;
    start = dot + 1;
  }
}

expected<std::pair<uint32_t, uint32_t>> parse_shard(const std::string& text) {
  auto bad = [&](const std::string& why) {
    return make_error(ec::parse_error,
                      "--shard: '" + text + "' " + why +
                          " (expected I/N: shard I of N, 0 <= I < N)");
  };
  const size_t slash = text.find('/');
  if (slash == std::string::npos) return bad("has no '/'");
  auto number = [](const std::string& s, uint32_t& out) {
    if (s.empty() || s.size() > 9 ||
        s.find_first_not_of("0123456789") != std::string::npos)
      return false;
    out = static_cast<uint32_t>(std::stoul(s));
    return true;
  };
  uint32_t i = 0, n = 0;
  if (!number(text.substr(0, slash), i)) return bad("has no shard number I");
  if (!number(text.substr(slash + 1), n)) return bad("has no shard count N");
  if (n == 0) return bad("has no shards (N must be at least 1)");
  if (i >= n) return bad("names a shard past the last one");
  return std::make_pair(i, n);
}

expected<std::vector<uint32_t>> parse_token_list(const std::string& text) {
  std::vector<uint32_t> out;
  if (text.empty())
    return make_error(ec::empty_input, "--tokens: the token list is empty");
  size_t pos = 0;
  while (true) {
    const size_t comma = text.find(',', pos);
    const std::string item = text.substr(
        pos, comma == std::string::npos ? std::string::npos : comma - pos);
    size_t used = 0;
    unsigned long long v = 0;
    bool good = !item.empty() && item[0] >= '0' && item[0] <= '9';
    if (good) {
      try {
        v = std::stoull(item, &used, 10);
      } catch (const std::exception&) {
        good = false;
      }
    }
    if (!good || used != item.size() || v > UINT32_MAX)
      return make_error(ec::parse_error,
                        "--tokens: entry " + std::to_string(out.size() + 1) +
                            " '" + item +
                            "' is not a token id (0..4294967295)");
    out.push_back(static_cast<uint32_t>(v));
    if (comma == std::string::npos) return out;
    pos = comma + 1;
  }
}

expected<std::vector<uint64_t>> token_chain(const std::vector<uint32_t>& tokens,
                                            uint32_t block_tokens,
                                            const std::string& salt) {
  auto hashes = hash_blocks(tokens, block_tokens, salt);
  if (!hashes)
    return make_error(ec::invalid_argument,
                      "--tokens: " + hashes.err().message);
  std::vector<uint64_t> chain;
  for (const auto& h : *hashes)
    chain.push_back(h.seq);
  return chain;
}

}  // namespace kvmesh
