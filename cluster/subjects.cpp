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

status check_agent_name(const std::string& name) {
  if (auto st = check_name("agent name", name); !st) return st;
  if (name == "batch")
    return make_error(ec::invalid_argument,
                      "agent name 'batch' is reserved (batches' subjects end "
                      "with it)");
  return ok;
}

std::string agent_of(const std::string& subject, const std::string& root) {
  if (subject.size() <= root.size() + 1 ||
      subject.compare(0, root.size(), root) != 0 || subject[root.size()] != '.')
    return {};
  const size_t from = root.size() + 1;
  const size_t end = subject.find('.', from);
  return subject.substr(from, end == std::string::npos ? end : end - from);
}

std::string upper_token(const std::string& name) {
  std::string t = name;
  for (char& c : t)
    c = std::isalnum(static_cast<unsigned char>(c))
            ? static_cast<char>(std::toupper(static_cast<unsigned char>(c)))
            : '_';
  return t;
}

}  // namespace kvmesh
