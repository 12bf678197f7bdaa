// A JetStream key-value bucket: durable intake's decision records and
// claims, each write confirmed or sent without waiting.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "cluster/js_writer.hpp"
#include "cluster/nats.hpp"
#include "core/error.hpp"

struct __jsCtx;
struct __kvStore;

namespace kvmesh {

// A JetStream key-value bucket (file storage, one value per key, entries
// expiring after a TTL): durable intake keeps there the decision made for
// each request, so that a redelivered request is answered with it instead
// of being auctioned a second time, and, in a second bucket, each router's
// claim on the requests it is deciding (docs/wire.md, "Durable intake").
struct record_options {
  std::string bucket = "KVMESH_DECISIONS";
  // Longer than any request can wait in the queue for a redelivery.
  std::chrono::milliseconds ttl{std::chrono::minutes(10)};
  int replicas = 1;  // as work_queue_options::replicas
  // false: bind only (a client reading answers), never create the bucket
  // with a client's settings; open() fails with ec::not_found when absent.
  bool create = true;
};

class record_store {
 public:
  // Binds to the bucket, creating it when missing. Errors name the bucket
  // and carry libnats' text. `bus` must outlive the store.
  static expected<std::unique_ptr<record_store>> open(
      nats_bus& bus, const record_options& opt);
  ~record_store();
  record_store(const record_store&) = delete;
  record_store& operator=(const record_store&) = delete;

  // Stored once the server confirmed it (a round trip). Callable from any
  // thread.
  status put(const std::string& key, const std::vector<uint8_t>& value);
  // The value, or an error: ec::not_found when there is none (never
  // written, or expired), ec::io_error when the server could not say.
  expected<std::vector<uint8_t>> get(const std::string& key);
  // Writes `value` under `key` only if the key holds nothing (never
  // written, expired, or erased): a compare-and-set, so that of two writers
  // exactly one wins. True when this one did; false when the key was held,
  // its value then in `*holder` (when given); an error when the server
  // could not say.
  expected<bool> create(const std::string& key,
                        const std::vector<uint8_t>& value,
                        std::vector<uint8_t>* holder = nullptr);
  // Lets go of `key`: a create may then take it again.
  status erase(const std::string& key);
  // Stores `value` under `key` without waiting for the server: many may
  // be in flight, where put() and create() cost a round trip each. `done`
  // runs once (never for a write still unanswered when the store is
  // destroyed): with ok once the server confirmed the write, else the
  // error. `only_new`: written only if the key has no message at all,
  // refused (ec::conflict) when it holds a value or the marker an erase
  // leaves (create() tells those apart). `done` runs on a libnats thread
  // (it must not block), or on the caller's when the write could not be
  // sent. Callable from any thread while the store exists.
  void put_async(const std::string& key, const std::vector<uint8_t>& value,
                 bool only_new, std::function<void(status)> done);

  uint64_t puts() const { return puts_.load(); }
  uint64_t hits() const { return hits_.load(); }
  uint64_t failures() const { return failures_.load(); }

 private:
  record_store() = default;
  // open()'s last step: what put_async writes through.
  static expected<std::unique_ptr<record_store>> open_writes(
      std::unique_ptr<record_store> r, nats_bus& bus);
  record_options opt_;
  __jsCtx* js_ = nullptr;
  __kvStore* kv_ = nullptr;
  std::unique_ptr<js_writer> writer_;  // put_async's
  std::atomic<uint64_t> puts_{0};
  std::atomic<uint64_t> hits_{0};
  std::atomic<uint64_t> failures_{0};
};

}  // namespace kvmesh
