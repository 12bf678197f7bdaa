// Names of the plain messages' enumerations and requests, as logs, metrics
// and JSON say them.
#include "messages/types.hpp"

namespace kvmesh {

const char* to_string(route_failure f) {
  switch (f) {
    case route_failure::overloaded:
      return "overloaded";
    case route_failure::refused:
      return "refused";
    case route_failure::no_workers:
      return "no_workers";
    case route_failure::unknown_model:
      return "unknown_model";
    case route_failure::other:
      return "other";
  }
  return "other";
}

std::string request_name(uint64_t id, const std::string& client_id) {
  std::string out = "request " + std::to_string(id);
  if (!client_id.empty()) out += " (client id \"" + client_id + "\")";
  return out;
}

}  // namespace kvmesh
