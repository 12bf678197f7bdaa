// Which agent holds each worker id: the first agent heard for it holds it
// while it is heard; bounded, and silent holders are forgotten.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <unordered_map>

namespace kvmesh {

class worker_owners {
 public:
  using clock = std::chrono::steady_clock;

  // A holder heard within `fresh` keeps its workers; at most `cap` worker
  // ids are held at once.
  worker_owners(clock::duration fresh, size_t cap) : fresh_(fresh), cap_(cap) {}

  enum class verdict : uint8_t {
    held,   // `agent` holds `worker` (now, or again): it may speak for it
    owned,  // another agent heard within `fresh` holds it
    full    // a new id past the cap
  };
  // `agent` speaks for `worker` at `now`.
  verdict claim(uint32_t worker, const std::string& agent,
                clock::time_point now);
  // Forgets the holders silent since before `before`, freeing their ids.
  void forget(clock::time_point before);
  size_t size() const { return held_.size(); }

 private:
  struct holder {
    std::string agent;
    clock::time_point seen;
  };
  clock::duration fresh_;
  size_t cap_;
  std::unordered_map<uint32_t, holder> held_;
};

}  // namespace kvmesh
