// The INDEX SHARD's persistent block map: a block_index mirrored in RocksDB.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/block_index.hpp"
#include "core/error.hpp"
#include "core/tiered_cache.hpp"

// RocksDB stays out of this header so the actor layer that owns a store
// does not compile against it.
namespace rocksdb {
class DB;
struct Options;
}  // namespace rocksdb

namespace kvmesh {

struct block_store_options {
  std::string dir;      // the RocksDB directory of this shard
  bool create = false;  // create the directory and DB if missing
  // fsync the WAL on every drop_worker (power loss); the changes persist()
  // hands over are always synced, as SST files.
  bool sync = false;
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

  // Applies `worker`'s KV events to the index and notes the changes they
  // make for the next persist(). All or nothing: invalid input changes
  // nothing.
  status apply(uint32_t worker, const cache_event* events, size_t n);
  status apply(uint32_t worker, const std::vector<cache_event>& events) {
    return apply(worker, events.data(), events.size());
  }
  // Hands the changes noted since the last call to the store's writer
  // thread, which writes each changed entry once (its last state) into one
  // SST file and ingests it into the DB: atomic and durable. A block that came
  // and went, or moved tiers twice, in between costs one write: under cache
  // churn most KV events never reach RocksDB. The caller (the shard actor)
  // never waits for RocksDB. What a crash loses is what was not yet written; a
  // shard that comes back is re-announced every worker's cache anyway. Returns
  // the writer's failures since the last call (the writer retries them).
  status persist();
  // Waits until everything handed over is written (or has failed).
  status settle();
  // Changes noted and not yet handed over (with repeats).
  size_t unpersisted() const { return noted_.size(); }
  // Entries written (puts and deletes) since open.
  uint64_t written() const { return written_.load(std::memory_order_relaxed); }
  // Forgets every entry of `worker`: in the index now, on disk after the
  // changes handed over before it.
  status drop_worker(uint32_t worker);
  // Persists what is noted, waits for the writer, writes the memtable (the
  // drops) out so the next open replays no WAL, and closes the DB; later
  // calls fail.
  // The destructor does this too, counting a failure in errors().
  status close();

  const block_index& index() const { return *index_; }
  const std::string& dir() const { return dir_; }
  // Bytes of every file in the directory (SST files, WAL, manifest, logs).
  uint64_t disk_bytes() const;
  // Operations that returned an error since open.
  uint64_t errors() const { return errors_.load(std::memory_order_relaxed); }

 private:
  // An entry's state after a change: its tier, or `gone`.
  struct change {
    uint64_t hash;
    uint32_t worker;
    int8_t where;
  };
  static constexpr int8_t gone = -1;
  // What the writer does next: write `changes`, or drop `worker`.
  struct job {
    std::vector<change> changes;
    uint32_t drop = no_drop;
  };
  static constexpr uint32_t no_drop = ~uint32_t{0};
  // Past this many queued jobs a new one joins the last; while writes
  // fail, the oldest is dropped instead (counted): the shard then differs
  // from its disk until the workers re-announce.
  static constexpr size_t max_jobs = 64;
  // Buffers kept for reuse up to this many changes (a second of steady
  // churn is about 150,000); a re-announce's larger ones are freed.
  static constexpr size_t max_kept_changes = size_t{1} << 19;

  block_store(std::string dir, block_index& index, bool sync);
  error fail(ec code, const std::string& what);
  void hand_over(job j);
  void hand_over_noted();
  void write_loop();
  status run(job& j);
  // Where the writer builds the SST file it ingests next.
  std::string ingest_path() const;
  void stop_writer();

  std::string dir_;
  block_index* index_;
  bool sync_;
  std::unique_ptr<rocksdb::DB> db_;
  std::vector<change> noted_;  // since the last persist, with repeats
  std::atomic<uint64_t> written_{0};
  std::atomic<uint64_t> errors_{0};

  // The writer thread and what it shares with the store's owner.
  std::thread writer_;
  std::mutex mu_;
  std::condition_variable work_;  // a job queued, or stop
  std::condition_variable idle_;  // the queue ran empty
  std::deque<job> jobs_;
  // The last written change list, emptied with its capacity kept: the next
  // persist() notes into it. This keeps the once-a-second hand-over free
  // of megabyte allocations, which glibc's heap served from ever new
  // places (the shard's RSS crept in steps).
  std::vector<change> spare_;
  // The DB's options, which the writer's SST files are built with.
  std::unique_ptr<rocksdb::Options> options_;
  bool busy_ = false;     // the writer runs a job
  bool failing_ = false;  // the writer's last job failed
  bool stop_ = false;
  std::string failure_;  // the writer's failures since the last persist()
};

}  // namespace kvmesh
