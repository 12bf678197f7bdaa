// Inside cluster/ (libnats' JetStream callers only): a natsStatus and
// jsErrCode turned into an error value with libnats' own detail.
#pragma once

#include <nats/nats.h>

#include <string>

#include "core/error.hpp"

namespace kvmesh::detail {

constexpr jsErrCode no_js_error = static_cast<jsErrCode>(0);

// libnats keeps a per-thread "last error" with the detail (often the
// server's own description) but does not clear it when a later call
// succeeds: it is news only if it changed across the call.
class last_error {
 public:
  last_error() { before_ = read(&before_status_); }
  std::string detail(natsStatus s) const {
    natsStatus now = NATS_OK;
    std::string text = read(&now);
    if (now != s || text.empty()) return {};
    if (now == before_status_ && text == before_) return {};
    return text;
  }

 private:
  static std::string read(natsStatus* s) {
    const char* t = nats_GetLastError(s);
    return t ? t : "";
  }
  natsStatus before_status_ = NATS_OK;
  std::string before_;
};

inline bool js_disabled(jsErrCode jerr) {
  return jerr == JSNotEnabledErr || jerr == JSNotEnabledForAccountErr;
}

// "<what>: <status>[: <detail>][ (JetStream error N)]".
inline error js_fail(const std::string& what, natsStatus s, jsErrCode jerr,
                     const last_error& last) {
  std::string msg = what + ": " + natsStatus_GetText(s);
  const std::string detail = last.detail(s);
  if (!detail.empty()) msg += ": " + detail;
  if (jerr != no_js_error)
    msg += " (JetStream error " + std::to_string(static_cast<int>(jerr)) + ")";
  return make_error(ec::io_error, std::move(msg));
}

}  // namespace kvmesh::detail
