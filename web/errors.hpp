// Error answers in OpenAI's shape (the gateway's, an engine front's):
// {"error": {"message", "type", "param", "code"}}.
#pragma once

#include <string>

namespace kvmesh::web {

// `type`: "invalid_request_error" for the client's mistakes (4xx), else
// what failed ("upstream_error", "overloaded_error", "timeout_error").
// `param` empty: null. `code` empty: null.
std::string openai_error_json(const std::string& message,
                              const std::string& type,
                              const std::string& param = {},
                              const std::string& code = {});

// The type of an error answer of `status`.
const char* openai_error_type(int status);

}  // namespace kvmesh::web
