// Model pools: names interned with a count of the workers serving each.
#include "core/model_pools.hpp"

namespace kvmesh {

std::optional<uint32_t> model_pools::find(const std::string& model) const {
  if (model.empty()) return any;
  auto it = ids_.find(model);
  if (it == ids_.end()) return std::nullopt;
  return it->second;
}

uint32_t model_pools::intern(const std::string& name) {
  auto it = ids_.find(name);
  if (it != ids_.end()) {
    ++refs_[it->second];
    return it->second;
  }
  uint32_t id;
  if (!unused_.empty()) {
    id = unused_.back();
    unused_.pop_back();
    names_[id] = name;
    refs_[id] = 1;
  } else {
    id = static_cast<uint32_t>(names_.size());
    names_.push_back(name);
    refs_.push_back(1);
  }
  ids_.emplace(name, id);
  return id;
}

void model_pools::release(uint32_t id) {
  if (--refs_[id] > 0) return;
  ids_.erase(names_[id]);
  names_[id].clear();
  unused_.push_back(id);
}

}  // namespace kvmesh
