// Which names may stand in a subject token.
#include "cluster/subjects.hpp"

#include <cctype>

namespace kvmesh {

status check_name(const std::string& what, const std::string& name) {
  if (name.empty() || name.size() > 64)
    return make_error(ec::invalid_argument,
                      what + " must have 1 to 64 characters: '" + name + "'");
  for (char c : name)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_'))
      return make_error(ec::invalid_argument,
                        what + " '" + name +
                            "' may hold only letters, digits, '-' and '_' "
                            "(it is a NATS subject token)");
  return ok;
}

}  // namespace kvmesh
