// The INDEX SHARD's persistent block map: a block_index mirrored in RocksDB.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/block_index.hpp"
#include "core/error.hpp"
#include "core/tiered_cache.hpp"

// RocksDB stays out of this header so the actor layer that owns a store
// does not compile against it.
namespace rocksdb {
class DB;
class WriteBatch;
}  // namespace rocksdb

namespace kvmesh {

struct block_store_options {
  std::string dir;      // the RocksDB directory of this shard
  bool create = false;  // create the directory and DB if missing
  bool sync = false;    // fsync the WAL on every write (power loss)
  // One memtable. Up to three are unflushed at a time, and a restart after
  // a crash replays (and sorts) what they held, so this bounds the extra
  // reopen time; 16 MiB holds about half a million entries.
  size_t write_buffer_bytes = size_t{16} << 20;
};

// One shard's block map on disk. Each entry is one (block, holder) pair:
// key = worker (4 bytes, big-endian) + block hash (8 bytes, big-endian),
// value = tier (1 byte). Worker first so that forgetting a worker is one
// range deletion instead of a scan; a load reads every key anyway, so the
// order costs nothing there.
//
// The store owns every change to the index it loaded: apply and
// drop_worker update the index and the DB together, and the caller must
// not change the index any other way while the store is open. Not
// thread-safe: one shard actor owns the store and its index (match() calls
// may run in parallel with each other, not with apply or drop_worker).
class block_store {
 public:
  // Opens (or, with opt.create, creates) the DB in opt.dir and loads every
  // entry into `into`, which must be empty. Any failure (missing directory,
  // corrupted files, an entry that does not decode, a RocksDB error) is an
  // error naming the directory; `into` is then left empty (or untouched,
  // if it was not empty to begin with).
  static expected<std::unique_ptr<block_store>> open(
      const block_store_options& opt, block_index& into);

  ~block_store();
  block_store(const block_store&) = delete;
  block_store& operator=(const block_store&) = delete;

  // Applies `worker`'s KV events to the index and persists the changes they
  // make in one atomic WriteBatch through the WAL. All or nothing: invalid
  // input or a failed write leaves the index and the DB as they were.
  status apply(uint32_t worker, const cache_event* events, size_t n);
  status apply(uint32_t worker, const std::vector<cache_event>& events) {
    return apply(worker, events.data(), events.size());
  }
  // Forgets every entry of `worker`, on disk first, then in the index.
  status drop_worker(uint32_t worker);
  // Writes the memtable out (so the next open replays no WAL) and closes
  // the DB; later calls fail. The destructor does this too, counting a
  // failure in errors().
  status close();

  const block_index& index() const { return *index_; }
  const std::string& dir() const { return dir_; }
  // Bytes of every file in the directory (SST files, WAL, manifest, logs).
  uint64_t disk_bytes() const;
  // Operations that returned an error since open.
  uint64_t errors() const { return errors_.load(std::memory_order_relaxed); }

 private:
  struct undo {
    uint64_t hash;
    bool had;
    tier where;
  };

  block_store(std::string dir, block_index& index, bool sync);
  error fail(ec code, const std::string& what);
  void roll_back(uint32_t worker);

  std::string dir_;
  block_index* index_;
  bool sync_;
  std::unique_ptr<rocksdb::DB> db_;
  std::unique_ptr<rocksdb::WriteBatch> batch_;  // reused across apply()
  std::vector<undo> undo_;                      // likewise
  std::atomic<uint64_t> errors_{0};
};

}  // namespace kvmesh
