// Secrets kept out of logs and shown configuration: URLs with a password
// or token in them.
#pragma once

#include <string>

namespace kvmesh {

// `url` (one URL or a comma-separated list) with every password in it
// (nats://user:secret@host) replaced by "***"; a lone token
// (nats://secret@host) is all secret.
inline std::string redact_url(const std::string& url) {
  std::string out;
  size_t from = 0;
  while (from <= url.size()) {
    size_t to = url.find(',', from);
    if (to == std::string::npos) to = url.size();
    std::string u = url.substr(from, to - from);
    const size_t scheme = u.find("://");
    const size_t start = scheme == std::string::npos ? 0 : scheme + 3;
    const size_t at = u.rfind('@');
    if (at != std::string::npos && at >= start) {
      const size_t colon = u.find(':', start);
      if (colon != std::string::npos && colon < at)
        u.replace(colon + 1, at - colon - 1, "***");
      else
        u.replace(start, at - start, "***");
    }
    out += (from == 0 ? "" : ",") + u;
    from = to + 1;
  }
  return out;
}

}  // namespace kvmesh
