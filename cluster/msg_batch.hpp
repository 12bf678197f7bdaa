// libnats messages destroyed in batches. natsMsg_Destroy hands a message to
// libnats' garbage-collector thread and wakes it when it sleeps: one
// context switch per message received, which a router pays per bid. A
// batch of up to 64 messages (or 256 KiB of payload) costs one wake.
#pragma once

#include <nats/nats.h>

#include <cstddef>

namespace kvmesh {

class nats_msg_batch {
 public:
  nats_msg_batch() = default;
  nats_msg_batch(const nats_msg_batch&) = delete;
  nats_msg_batch& operator=(const nats_msg_batch&) = delete;
  ~nats_msg_batch() { flush(); }

  // Destroys `m` now or with the batch; call once its data is no longer
  // read.
  void destroy(natsMsg* m) {
    const int len = natsMsg_GetDataLength(m);
    bytes_ += len > 0 ? static_cast<size_t>(len) : 0;
    held_[count_++] = m;
    if (count_ == max_count || bytes_ >= max_bytes) flush();
  }
  void flush() {
    for (size_t i = 0; i < count_; ++i)
      natsMsg_Destroy(held_[i]);
    count_ = 0;
    bytes_ = 0;
  }

 private:
  static constexpr size_t max_count = 64;
  static constexpr size_t max_bytes = size_t{256} << 10;
  natsMsg* held_[max_count] = {};
  size_t count_ = 0;
  size_t bytes_ = 0;
};

}  // namespace kvmesh
