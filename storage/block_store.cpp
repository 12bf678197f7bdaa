// RocksDB persistence of one shard's block map: load, batched writes, drops.
#include "storage/block_store.hpp"

#include <rocksdb/db.h>
#include <rocksdb/iterator.h>
#include <rocksdb/options.h>
#include <rocksdb/slice.h>
#include <rocksdb/sst_file_writer.h>
#include <rocksdb/status.h>
#include <rocksdb/table.h>

#include <algorithm>
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
    : dir_(std::move(dir)), index_(&index), sync_(sync) {}

block_store::~block_store() {
  if (db_) (void)close();
  stop_writer();
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
  o.max_background_jobs = 2;
  o.max_background_flushes = 1;
  o.max_background_compactions = 1;
  o.bytes_per_sync = 1 << 20;
  o.level_compaction_dynamic_level_bytes = true;
  o.keep_log_file_num = 4;
  // Uncompressed: Snappy took a twentieth of the shard's CPU (its writer
  // thread compresses every ingested file) to save disk a block map does
  // not need saved: after a 20,000-request run with 64 workers the DB held
  // 20 MB instead of 12.
  o.compression = rocksdb::kNoCompression;
  // Each persist() ingests one L0 file over the whole key range, and under
  // cache churn most of its entries are deleted again within seconds.
  // Compacting 16 files at a time instead of 4 lets more of them cancel
  // before they are rewritten: the shard's CPU per decision fell by a
  // fifth to a third in the mesh's throughput runs (docs/benchmarks.md).
  o.level0_file_num_compaction_trigger = 16;
  o.level0_slowdown_writes_trigger = 40;
  o.level0_stop_writes_trigger = 64;
  // The load below is one long read on a 2-core box; a compaction of a
  // backlog of L0 files started now would compete with it for the CPU.
  // Compactions resume once the index is loaded.
  o.disable_auto_compactions = true;
  // The shard never point-reads RocksDB: it reads the whole DB once, at
  // load, with fill_cache off, and answers lookups from memory. The default
  // block cache would only fill, over hours, with index blocks of files
  // compaction reads, which a 30-minute soak showed as steady RSS growth.
  rocksdb::BlockBasedTableOptions table;
  table.no_block_cache = true;
  o.table_factory.reset(rocksdb::NewBlockBasedTableFactory(table));
  rocksdb::DB* raw = nullptr;
  rocksdb::Status s = rocksdb::DB::Open(o, opt.dir, &raw);
  if (!s.ok()) return refuse(ec::io_error, "cannot open: " + describe(s));
  std::unique_ptr<block_store> st(new block_store(opt.dir, into, opt.sync));
  st->db_.reset(raw);
  st->options_ = std::make_unique<rocksdb::Options>(o);
  // A file the writer was building when the process died: never ingested.
  // Should it not go, the writer's first job fails on it, saying so.
  std::error_code stale;
  fs::remove(st->ingest_path(), stale);

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
  st->writer_ = std::thread([p = st.get()] { p->write_loop(); });
  return st;
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
  // The index decides what an event means (a stale removal is a no-op);
  // only real changes are noted, with the state the index then has, so the
  // index and the disk cannot disagree.
  for (size_t i = 0; i < n; ++i) {
    const cache_event& e = events[i];
    if (!index_->apply(worker, e)) continue;
    noted_.push_back(change{
        e.hash, worker,
        e.kind == cache_event::stored ? static_cast<int8_t>(e.where) : gone});
  }
  return ok;
}

void block_store::hand_over_noted() {
  if (noted_.empty()) return;
  job j;
  j.changes.swap(noted_);
  {
    std::lock_guard<std::mutex> lk(mu_);
    noted_.swap(spare_);
  }
  hand_over(std::move(j));
}

status block_store::persist() {
  if (!db_) return fail(ec::invalid_argument, "persist on a closed store");
  hand_over_noted();
  std::lock_guard<std::mutex> lk(mu_);
  if (failure_.empty()) return ok;
  std::string f;
  f.swap(failure_);
  return make_error(ec::io_error, f);
}

status block_store::settle() {
  std::unique_lock<std::mutex> lk(mu_);
  idle_.wait(lk, [&] {
    return (jobs_.empty() && !busy_) || !failure_.empty() ||
           !writer_.joinable();
  });
  if (failure_.empty()) return ok;
  std::string f;
  f.swap(failure_);
  return make_error(ec::io_error, f);
}

void block_store::hand_over(job j) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (jobs_.size() >= max_jobs) {
      if (failing_) {
        // Writes keep failing: bound the memory the backlog holds.
        jobs_.pop_front();
        errors_.fetch_add(1, std::memory_order_relaxed);
        failure_ +=
            (failure_.empty() ? "" : "; ") +
            std::string(
                "block store " + dir_ +
                ": writes failing; dropped the oldest unwritten changes (the "
                "workers' re-announce restores them)");
      } else if (j.drop == no_drop && jobs_.back().drop == no_drop) {
        // The writer is behind: one larger job coalesces more.
        auto& to = jobs_.back().changes;
        to.insert(to.end(), j.changes.begin(), j.changes.end());
        return;
      }
    }
    jobs_.push_back(std::move(j));
  }
  work_.notify_one();
}

void block_store::write_loop() {
  std::unique_lock<std::mutex> lk(mu_);
  for (;;) {
    work_.wait(lk, [&] { return stop_ || !jobs_.empty(); });
    if (jobs_.empty()) return;  // stopped, and everything written
    job j = std::move(jobs_.front());
    jobs_.pop_front();
    busy_ = true;
    lk.unlock();
    const status s = run(j);
    lk.lock();
    busy_ = false;
    failing_ = !s;
    if (s && j.changes.capacity() > spare_.capacity() &&
        j.changes.capacity() <= max_kept_changes) {
      j.changes.clear();
      spare_.swap(j.changes);
    }
    if (!s) {
      failure_ += (failure_.empty() ? "" : "; ") + s.err().message;
      idle_.notify_all();
      if (!stop_) {
        // Retried before newer jobs, whose changes must land after it.
        jobs_.push_front(std::move(j));
        work_.wait_for(lk, std::chrono::seconds(1), [&] { return stop_; });
        continue;
      }
    }
    if (jobs_.empty()) idle_.notify_all();
  }
}

status block_store::run(job& j) {
  rocksdb::WriteOptions wo;
  wo.sync = sync_;
  char key[key_size];
  if (j.drop != no_drop) {
    char end[key_size];
    encode_key(key, j.drop, 0);
    encode_key(end, j.drop + 1, 0);
    const rocksdb::Status s = db_->DeleteRange(wo, db_->DefaultColumnFamily(),
                                               rocksdb::Slice(key, key_size),
                                               rocksdb::Slice(end, key_size));
    if (!s.ok())
      return fail(ec::io_error, "cannot drop worker " + std::to_string(j.drop) +
                                    ": " + describe(s));
    return ok;
  }
  // The last change of each entry wins: stable, so repeats keep their
  // order, and the last of a run of equal keys is written.
  auto& c = j.changes;
  if (c.empty()) return ok;  // an SST file must have an entry
  std::stable_sort(c.begin(), c.end(), [](const change& a, const change& b) {
    return a.worker != b.worker ? a.worker < b.worker : a.hash < b.hash;
  });
  // Sorted, each entry once: what an SST file needs. Ingesting it skips
  // the WAL, the memtable and its flush, which together cost the shard
  // more CPU than anything else under cache churn (docs/benchmarks.md).
  const std::string path = ingest_path();
  // A file that was not ingested goes, so the next attempt starts afresh.
  auto abandon = [&](const std::string& what, const rocksdb::Status& st) {
    std::error_code fe;
    fs::remove(path, fe);
    return fail(ec::io_error, what + path + ": " + describe(st));
  };
  rocksdb::SstFileWriter w(rocksdb::EnvOptions(), *options_);
  rocksdb::Status s = w.Open(path);
  if (!s.ok())
    return fail(ec::io_error, "cannot create " + path + ": " + describe(s));
  size_t n = 0;
  for (size_t i = 0; i < c.size() && s.ok(); ++i) {
    if (i + 1 < c.size() && c[i + 1].worker == c[i].worker &&
        c[i + 1].hash == c[i].hash)
      continue;
    encode_key(key, c[i].worker, c[i].hash);
    const char t = static_cast<char>(c[i].where);
    s = c[i].where == gone
            ? w.Delete(rocksdb::Slice(key, key_size))
            : w.Put(rocksdb::Slice(key, key_size), rocksdb::Slice(&t, 1));
    ++n;
  }
  if (s.ok()) s = w.Finish();  // synced to disk
  if (!s.ok()) return abandon("cannot write ", s);
  rocksdb::IngestExternalFileOptions io;
  io.move_files = true;  // linked into the DB, then this name removed
  s = db_->IngestExternalFile({path}, io);
  if (!s.ok()) return abandon("cannot ingest ", s);
  written_.fetch_add(n, std::memory_order_relaxed);
  return ok;
}

std::string block_store::ingest_path() const {
  return (fs::path(dir_) / "kvmesh-ingest.sst").string();
}

void block_store::stop_writer() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_ = true;
  }
  work_.notify_all();
  if (writer_.joinable()) writer_.join();
}

status block_store::drop_worker(uint32_t worker) {
  if (!db_) return fail(ec::invalid_argument, "drop on a closed store");
  if (worker >= block_index::max_workers)
    return fail(ec::invalid_argument,
                "worker id " + std::to_string(worker) + " too large");
  // After the changes noted so far, so that none outlives the drop.
  hand_over_noted();
  job j;
  j.drop = worker;
  hand_over(std::move(j));
  index_->drop_worker(worker);
  return ok;
}

status block_store::close() {
  if (!db_) return fail(ec::invalid_argument, "already closed");
  // Writing the memtable (drops) out now spares the next open a WAL
  // replay; it also makes the drops safe from power loss, not only from a
  // crash of this process.
  std::string problems;
  auto note = [&](const std::string& p) {
    problems += (problems.empty() ? "" : "; ") + p;
  };
  if (const status p = persist(); !p) note(p.err().message);
  if (const status p = settle(); !p) note(p.err().message);
  stop_writer();
  if (const status p = settle(); !p) note(p.err().message);
  rocksdb::FlushOptions fo;
  fo.wait = true;
  const rocksdb::Status f = db_->Flush(fo);
  if (!f.ok()) {
    note("flush failed: " + describe(f));
    const rocksdb::Status w = db_->SyncWAL();  // the WAL then must be durable
    if (!w.ok()) problems += "; WAL sync failed: " + describe(w);
  }
  const rocksdb::Status c = db_->Close();
  db_.reset();
  if (!c.ok()) note(describe(c));
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
