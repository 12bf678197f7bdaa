// RocksDB persistence of one shard's block map: load, batched writes, drops.
#include "storage/block_store.hpp"

#include <rocksdb/db.h>
#include <rocksdb/iterator.h>
#include <rocksdb/memtablerep.h>
#include <rocksdb/options.h>
#include <rocksdb/slice.h>
#include <rocksdb/status.h>
#include <rocksdb/write_batch.h>

#include <cstdio>
#include <filesystem>
#include <system_error>
#include <utility>

namespace kvmesh {
namespace {

namespace fs = std::filesystem;

constexpr size_t key_size = 12;

void put_be(char* p, uint64_t v, int bytes) {
  for (int i = bytes - 1; i >= 0; --i, v >>= 8)
    p[i] = static_cast<char>(v & 0xff);
}

uint64_t get_be(const char* p, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i)
    v = v << 8 | static_cast<unsigned char>(p[i]);
  return v;
}

void encode_key(char* k, uint32_t worker, uint64_t hash) {
  put_be(k, worker, 4);
  put_be(k + 4, hash, 8);
}

std::string hex(const rocksdb::Slice& s) {
  std::string out;
  char b[3];
  for (size_t i = 0; i < s.size() && i < 32; ++i) {
    std::snprintf(b, sizeof b, "%02x", static_cast<unsigned char>(s[i]));
    out += b;
  }
  return out;
}

std::string describe(const rocksdb::Status& s) {
  return s.ToString();
}

}  // namespace

block_store::block_store(std::string dir, block_index& index, bool sync)
    : dir_(std::move(dir)),
      index_(&index),
      sync_(sync),
      batch_(std::make_unique<rocksdb::WriteBatch>()) {}

block_store::~block_store() {
  if (db_) (void)close();
}

error block_store::fail(ec code, const std::string& what) {
  errors_.fetch_add(1, std::memory_order_relaxed);
  return make_error(code, "block store " + dir_ + ": " + what);
}

expected<std::unique_ptr<block_store>> block_store::open(
    const block_store_options& opt, block_index& into) {
  auto refuse = [&](ec code, const std::string& what) {
    into.clear();
    return make_error(code, "block store " + opt.dir + ": " + what);
  };
  if (opt.dir.empty())
    return make_error(ec::invalid_argument, "block store: no directory");
  if (into.blocks() != 0)  // refused before refuse() would clear it
    return make_error(
        ec::invalid_argument,
        "block store " + opt.dir + ": the index to load into is not empty");
  std::error_code fe;
  const fs::path dir(opt.dir);
  if (!opt.create) {
    if (!fs::exists(dir, fe))
      return refuse(ec::not_found,
                    "directory does not exist (and create is off)" +
                        (fe ? ": " + fe.message() : std::string()));
  } else {
    fs::create_directories(dir, fe);
    if (fe) return refuse(ec::io_error, "cannot create: " + fe.message());
    // Without CURRENT, RocksDB with create_if_missing starts a new, empty DB
    // and deletes what it finds as obsolete: a shard whose CURRENT got lost
    // would come back silently empty. Only an empty directory is new.
    const bool has_current = fs::exists(dir / "CURRENT", fe);
    const bool empty = !fe && !has_current && fs::is_empty(dir, fe);
    if (fe) return refuse(ec::io_error, "cannot inspect: " + fe.message());
    if (!has_current && !empty)
      return refuse(ec::io_error,
                    "directory is not empty but has no CURRENT file; "
                    "refusing to create a new DB over it");
  }

  rocksdb::Options o;
  o.create_if_missing = opt.create;
  o.paranoid_checks = true;
  o.write_buffer_size = opt.write_buffer_bytes;
  // Flushing (sorting the vector memtable below) is what limits sustained
  // ingest; two flushes may run at once so one slow flush does not stall
  // writes while the other core idles.
  o.max_background_jobs = 3;
  o.max_background_flushes = 2;
  o.max_background_compactions = 1;
  o.max_write_buffer_number = 3;
  o.bytes_per_sync = 1 << 20;
  o.level_compaction_dynamic_level_bytes = true;
  o.keep_log_file_num = 4;
  // KV events carry random hashes, and a skiplist memtable spends microseconds
  // per random insert at a million entries. The shard never reads its
  // memtable except to flush it (queries go to the index), so an unsorted
  // vector sorted once at flush does the same job; it takes one writer at a
  // time, which is the store's model anyway.
  o.memtable_factory = std::make_shared<rocksdb::VectorRepFactory>();
  o.allow_concurrent_memtable_write = false;
  // Keep what the WAL replays in the memtable rather than writing it out
  // before the open returns: a restarted shard is back sooner.
  o.avoid_flush_during_recovery = true;
  // The load below is one long read on a 2-core box; a compaction of a
  // backlog of L0 files started now would compete with it for the CPU.
  // Compactions resume once the index is loaded.
  o.disable_auto_compactions = true;
  rocksdb::DB* raw = nullptr;
  rocksdb::Status s = rocksdb::DB::Open(o, opt.dir, &raw);
  if (!s.ok()) return refuse(ec::io_error, "cannot open: " + describe(s));
  std::unique_ptr<block_store> st(new block_store(opt.dir, into, opt.sync));
  st->db_.reset(raw);

  // One sequential pass; these pages are read once, so keep them out of the
  // block cache and read ahead in large steps.
  rocksdb::ReadOptions ro;
  ro.fill_cache = false;
  ro.verify_checksums = true;
  ro.readahead_size = size_t{4} << 20;
  std::unique_ptr<rocksdb::Iterator> it(st->db_->NewIterator(ro));
  // Entries come sorted by worker and hash, which is random order for the
  // index table; decoding a run and prefetching its slots first lets those
  // cache misses overlap instead of paying them one by one.
  struct decoded {
    uint32_t worker;
    cache_event e;
  };
  auto undecodable = [&](const rocksdb::Slice& k, const rocksdb::Slice& v) {
    return refuse(ec::io_error, "entry does not decode (key " + hex(k) +
                                    ", value " + hex(v) +
                                    "): not a block store, or corrupted");
  };
  constexpr size_t run = 32;
  decoded buf[run];
  size_t filled = 0;
  auto drain = [&] {
    for (size_t i = 0; i < filled; ++i)
      into.apply(buf[i].worker, buf[i].e);
    filled = 0;
  };
  for (it->SeekToFirst(); it->Valid(); it->Next()) {
    const rocksdb::Slice k = it->key();
    const rocksdb::Slice v = it->value();
    if (k.size() != key_size || v.size() != 1) return undecodable(k, v);
    decoded& d = buf[filled];
    d.worker = static_cast<uint32_t>(get_be(k.data(), 4));
    d.e = cache_event{cache_event::stored, static_cast<tier>(v[0]),
                      get_be(k.data() + 4, 8)};
    if (!block_index::valid(d.worker, d.e)) return undecodable(k, v);
    into.prefetch(d.e.hash);
    if (++filled == run) drain();
  }
  drain();
  s = it->status();
  it.reset();
  if (!s.ok()) return refuse(ec::io_error, "cannot load: " + describe(s));
  s = st->db_->SetOptions({{"disable_auto_compactions", "false"}});
  if (!s.ok())
    return refuse(ec::io_error, "cannot resume compactions: " + describe(s));
  return st;
}

void block_store::roll_back(uint32_t worker) {
  for (auto u = undo_.rbegin(); u != undo_.rend(); ++u) {
    if (u->had) {
      index_->apply(worker,
                    cache_event{cache_event::stored, u->where, u->hash});
      continue;
    }
    tier now;
    if (index_->find(u->hash, worker, &now))
      index_->apply(worker, cache_event{cache_event::removed, now, u->hash});
  }
  undo_.clear();
}

status block_store::apply(uint32_t worker, const cache_event* events,
                          size_t n) {
  if (!db_) return fail(ec::invalid_argument, "apply on a closed store");
  // Check everything first: a batch is applied whole or not at all. At
  // shard size every event's slot is a cache miss; start them all now.
  for (size_t i = 0; i < n; ++i) {
    index_->prefetch(events[i].hash);
    if (!block_index::valid(worker, events[i]))
      return fail(ec::invalid_argument,
                  "invalid event " + std::to_string(i) + " of worker " +
                      std::to_string(worker) +
                      " (worker id too large, or an unknown tier or kind)");
  }
  batch_->Clear();
  undo_.clear();
  char key[key_size];
  for (size_t i = 0; i < n; ++i) {
    const cache_event& e = events[i];
    undo u{e.hash, false, tier::gpu};
    u.had = index_->find(e.hash, worker, &u.where);
    // The index decides what an event means (a stale removal is a no-op),
    // and only real changes reach the DB, so the two cannot disagree.
    if (!index_->apply(worker, e)) continue;
    undo_.push_back(u);
    encode_key(key, worker, e.hash);
    const char t = static_cast<char>(e.where);
    const rocksdb::Status s =
        e.kind == cache_event::stored
            ? batch_->Put(rocksdb::Slice(key, key_size), rocksdb::Slice(&t, 1))
            : batch_->Delete(rocksdb::Slice(key, key_size));
    if (!s.ok()) {
      roll_back(worker);
      return fail(ec::io_error, "cannot batch an event: " + describe(s));
    }
  }
  if (batch_->Count() == 0) return ok;
  rocksdb::WriteOptions wo;
  wo.sync = sync_;
  const rocksdb::Status s = db_->Write(wo, batch_.get());
  if (!s.ok()) {
    roll_back(worker);
    return fail(ec::io_error, "write failed: " + describe(s));
  }
  undo_.clear();
  return ok;
}

status block_store::drop_worker(uint32_t worker) {
  if (!db_) return fail(ec::invalid_argument, "drop on a closed store");
  if (worker >= block_index::max_workers)
    return fail(ec::invalid_argument,
                "worker id " + std::to_string(worker) + " too large");
  char begin[key_size];
  char end[key_size];
  encode_key(begin, worker, 0);
  encode_key(end, worker + 1, 0);
  rocksdb::WriteOptions wo;
  wo.sync = sync_;
  const rocksdb::Status s = db_->DeleteRange(wo, db_->DefaultColumnFamily(),
                                             rocksdb::Slice(begin, key_size),
                                             rocksdb::Slice(end, key_size));
  if (!s.ok())
    return fail(ec::io_error, "cannot drop worker " + std::to_string(worker) +
                                  ": " + describe(s));
  index_->drop_worker(worker);
  return ok;
}

status block_store::close() {
  if (!db_) return fail(ec::invalid_argument, "already closed");
  // Writing the memtable out now spares the next open a WAL replay (and
  // the sort of an unsorted memtable); it also makes the data safe from
  // power loss, not only from a crash of this process.
  std::string problems;
  rocksdb::FlushOptions fo;
  fo.wait = true;
  const rocksdb::Status f = db_->Flush(fo);
  if (!f.ok()) {
    problems = "flush failed: " + describe(f);
    const rocksdb::Status w = db_->SyncWAL();  // the WAL then must be durable
    if (!w.ok()) problems += "; WAL sync failed: " + describe(w);
  }
  const rocksdb::Status c = db_->Close();
  db_.reset();
  if (!c.ok()) problems += (problems.empty() ? "" : "; ") + describe(c);
  if (!problems.empty()) return fail(ec::io_error, "close: " + problems);
  return ok;
}

uint64_t block_store::disk_bytes() const {
  uint64_t total = 0;
  std::error_code fe;
  for (fs::directory_iterator it(dir_, fe), end; !fe && it != end;
       it.increment(fe)) {
    std::error_code se;
    if (!it->is_regular_file(se)) continue;
    const uintmax_t size = it->file_size(se);
    if (!se) total += size;
  }
  return total;
}

}  // namespace kvmesh
