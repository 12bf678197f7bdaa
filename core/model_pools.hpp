// Model pools: which workers serve which model (a base model's or a LoRA
// adapter's name), so that only a request's pool bids for it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

namespace kvmesh {

class model_pools {
 public:
  // A request that names no model: every worker serves it.
  static constexpr uint32_t any = UINT32_MAX;

  // Worker `w` serves the models named `names` from now on (its
  // heartbeat's list: a base model's or an adapter's own name). Names are
  // kept while some worker serves them: the table holds what the live
  // fleet announces, not every name ever heard. `Named` has a `name`.
  template <class Named>
  void set(uint32_t w, const std::vector<Named>& names) {
    if (w >= of_.size() && names.empty()) return;
    if (w >= of_.size()) of_.resize(w + 1);
    auto& mine = of_[w];
    // Heartbeats repeat the same list: compare before touching anything.
    bool same = mine.size() == names.size();
    for (size_t i = 0; same && i < names.size(); ++i)
      same = names_[mine[i]] == name_of(names[i]);
    if (same) return;
    std::vector<uint32_t> next;
    next.reserve(names.size());
    for (const auto& n : names)
      next.push_back(intern(name_of(n)));
    for (uint32_t id : mine)
      release(id);
    mine = std::move(next);
  }
  void set(uint32_t w, const std::vector<std::string>& names) {
    set<std::string>(w, names);
  }
  void clear(uint32_t w) { set(w, std::vector<std::string>{}); }
  // The id of `model` if some worker serves it; `any` for "".
  std::optional<uint32_t> find(const std::string& model) const;
  bool serves(uint32_t w, uint32_t model) const {
    if (model == any) return true;
    if (w >= of_.size()) return false;
    for (uint32_t m : of_[w])
      if (m == model) return true;
    return false;
  }
  // Distinct names served.
  size_t size() const { return ids_.size(); }

 private:
  static const std::string& name_of(const std::string& s) { return s; }
  template <class Named>
  static const std::string& name_of(const Named& n) {
    return n.name;
  }
  uint32_t intern(const std::string& name);
  void release(uint32_t id);

  std::unordered_map<std::string, uint32_t> ids_;
  std::vector<std::string> names_;         // by id
  std::vector<uint32_t> refs_;             // workers serving each id
  std::vector<uint32_t> unused_;           // ids free for reuse
  std::vector<std::vector<uint32_t>> of_;  // by worker: its ids
};

}  // namespace kvmesh
