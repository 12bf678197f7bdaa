// OpenAI-shaped error bodies (errors.hpp).
#include "web/errors.hpp"

#include <nlohmann/json.hpp>

namespace kvmesh::web {

std::string openai_error_json(const std::string& message,
                              const std::string& type, const std::string& param,
                              const std::string& code) {
  nlohmann::ordered_json e;
  e["message"] = message;
  e["type"] = type;
  e["param"] =
      param.empty() ? nlohmann::ordered_json() : nlohmann::ordered_json(param);
  e["code"] =
      code.empty() ? nlohmann::ordered_json() : nlohmann::ordered_json(code);
  nlohmann::ordered_json out;
  out["error"] = std::move(e);
  // Replace: a message quoting a client's bytes may not be UTF-8.
  return out.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

const char* openai_error_type(int status) {
  if (status == 429) return "rate_limit_error";
  if (status == 504) return "timeout_error";
  if (status == 503) return "overloaded_error";
  if (status >= 500) return "upstream_error";
  if (status == 404) return "invalid_request_error";
  return "invalid_request_error";
}

}  // namespace kvmesh::web
