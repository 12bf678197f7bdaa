// libnats' key-value store behind record_store: the bucket bound or
// created (waiting out a cluster electing its leaders), confirmed puts,
// reads, compare-and-set creates, erases, and writes through js_writer.
#include "cluster/record_store.hpp"

#include <nats/nats.h>

#include <chrono>
#include <thread>

#include "cluster/js_error.hpp"

namespace kvmesh {

using detail::js_fail;
using detail::last_error;
using detail::no_js_error;

expected<std::unique_ptr<record_store>> record_store::open(
    nats_bus& bus, const record_options& opt) {
  const std::string name = "bucket " + opt.bucket;
  if (opt.bucket.empty())
    return make_error(ec::invalid_argument, "record store: empty bucket name");
  if (opt.ttl.count() <= 0)
    return make_error(ec::invalid_argument, name + ": ttl must be positive");
  if (opt.replicas < 1 || opt.replicas > 5)
    return make_error(ec::invalid_argument, name + ": replicas must be 1 to 5");
  natsConnection* nc = bus.native();
  if (!nc) return make_error(ec::invalid_argument, name + ": no connection");
  // A client's credential may lack the bucket's reads: nats_bus says so at
  // once, where libnats would wait out its timeout (and this its retries)
  // and the client would never read an answer it missed.
  if (!opt.create)
    for (const std::string& read : {"$JS.API.STREAM.INFO.KV_" + opt.bucket,
                                    "$JS.API.DIRECT.GET.KV_" + opt.bucket +
                                        ".$KV." + opt.bucket + ".probe"})
      if (auto r = bus.request(read, {}, std::chrono::seconds(2));
          !r && r.err().message.find("permission denied") != std::string::npos)
        return make_error(ec::invalid_argument,
                          name + ": cannot read it: " + r.err().message);
  std::unique_ptr<record_store> r(new record_store());
  r->opt_ = opt;
  last_error last;
  natsStatus s = natsConnection_JetStream(&r->js_, nc, nullptr);
  if (s != NATS_OK)
    return js_fail(name + ": JetStream context", s, no_js_error, last);
  // Bind first: creating an existing bucket whose settings differ (another
  // router's TTL) would be refused. A JetStream cluster that has just
  // started (or lost a node) answers nothing until it has elected its
  // leaders: timeouts are retried for a while, as a starting router can
  // wait.
  last_error bind_last;
  const auto until =
      std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while ((s = js_KeyValue(&r->kv_, r->js_, opt.bucket.c_str())) ==
             NATS_TIMEOUT &&
         std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
  if (s == NATS_OK) return open_writes(std::move(r), bus);
  if (s != NATS_NOT_FOUND)
    return js_fail(name + ": bind", s, no_js_error, bind_last);
  if (!opt.create)
    return make_error(ec::not_found, name +
                                         ": no such bucket (not created "
                                         "by a client)");
  kvConfig cfg;
  last_error create_last;
  if ((s = kvConfig_Init(&cfg)) != NATS_OK)
    return js_fail(name + ": config", s, no_js_error, create_last);
  cfg.Bucket = opt.bucket.c_str();
  cfg.History = 1;
  cfg.TTL = opt.ttl.count() * 1000000;  // nanoseconds
  cfg.StorageType = js_FileStorage;
  cfg.Replicas = opt.replicas;
  while ((s = js_CreateKeyValue(&r->kv_, r->js_, &cfg)) == NATS_TIMEOUT &&
         std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
  if (s != NATS_OK) {
    // Another router created it in between: bind to theirs.
    last_error again_last;
    if (js_KeyValue(&r->kv_, r->js_, opt.bucket.c_str()) == NATS_OK)
      return open_writes(std::move(r), bus);
    return js_fail(name + ": create", s, no_js_error, create_last);
  }
  return open_writes(std::move(r), bus);
}

expected<std::unique_ptr<record_store>> record_store::open_writes(
    std::unique_ptr<record_store> r, nats_bus& bus) {
  auto w = js_writer::open(bus, "bucket " + r->opt_.bucket);
  if (!w) return w.err();
  r->writer_ = std::move(*w);
  return r;
}

record_store::~record_store() {
  writer_.reset();  // its answers count in puts_ and failures_
  if (kv_) kvStore_Destroy(kv_);
  if (js_) jsCtx_Destroy(js_);
}

void record_store::put_async(const std::string& key,
                             const std::vector<uint8_t>& value, bool only_new,
                             std::function<void(status)> done) {
  // The subject a put of `key` goes to (kvStore_Put's, for a bucket of
  // this account without a domain).
  writer_->publish("$KV." + opt_.bucket + "." + key, value, only_new, {},
                   [this, done = std::move(done)](expected<uint64_t> r) {
                     if (r)
                       puts_.fetch_add(1);
                     else if (r.err().code != ec::conflict)
                       failures_.fetch_add(1);
                     done(r ? ok : status{r.err()});
                   });
}

status record_store::put(const std::string& key,
                         const std::vector<uint8_t>& value) {
  last_error last;
  uint64_t rev = 0;
  const natsStatus s = kvStore_Put(&rev, kv_, key.c_str(), value.data(),
                                   static_cast<int>(value.size()));
  if (s != NATS_OK) {
    failures_.fetch_add(1);
    return js_fail("bucket " + opt_.bucket + ": put " + key, s, no_js_error,
                   last);
  }
  puts_.fetch_add(1);
  return ok;
}

expected<std::vector<uint8_t>> record_store::get(const std::string& key) {
  last_error last;
  kvEntry* e = nullptr;
  const natsStatus s = kvStore_Get(&e, kv_, key.c_str());
  if (s == NATS_NOT_FOUND)
    return make_error(ec::not_found, "bucket " + opt_.bucket + ": no " + key);
  if (s != NATS_OK) {
    failures_.fetch_add(1);
    return js_fail("bucket " + opt_.bucket + ": get " + key, s, no_js_error,
                   last);
  }
  const auto* data = static_cast<const uint8_t*>(kvEntry_Value(e));
  std::vector<uint8_t> out(data, data + kvEntry_ValueLen(e));
  kvEntry_Destroy(e);
  hits_.fetch_add(1);
  return out;
}

expected<bool> record_store::create(const std::string& key,
                                    const std::vector<uint8_t>& value,
                                    std::vector<uint8_t>* holder) {
  last_error last;
  uint64_t rev = 0;
  const natsStatus s = kvStore_Create(&rev, kv_, key.c_str(), value.data(),
                                      static_cast<int>(value.size()));
  if (s == NATS_OK) {
    puts_.fetch_add(1);
    return true;
  }
  // libnats says "wrong last sequence" for a key someone holds, but also
  // fails the same way on a lost answer: only the value there tells.
  auto there = get(key);
  if (there) {
    if (holder) *holder = std::move(*there);
    return false;
  }
  failures_.fetch_add(1);
  return js_fail("bucket " + opt_.bucket + ": create " + key, s, no_js_error,
                 last);
}

status record_store::erase(const std::string& key) {
  last_error last;
  const natsStatus s = kvStore_Delete(kv_, key.c_str());
  if (s != NATS_OK) {
    failures_.fetch_add(1);
    return js_fail("bucket " + opt_.bucket + ": erase " + key, s, no_js_error,
                   last);
  }
  return ok;
}

}  // namespace kvmesh
