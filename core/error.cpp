// Names of the error codes, for messages and logs.
#include "core/error.hpp"

namespace kvmesh {

const char* to_string(ec code) {
  switch (code) {
    case ec::none:
      return "none";
    case ec::invalid_argument:
      return "invalid_argument";
    case ec::empty_input:
      return "empty_input";
    case ec::parse_error:
      return "parse_error";
    case ec::io_error:
      return "io_error";
    case ec::not_found:
      return "not_found";
    case ec::capacity_exceeded:
      return "capacity_exceeded";
    case ec::timeout:
      return "timeout";
    case ec::conflict:
      return "conflict";
  }
  return "unknown";
}

}  // namespace kvmesh
