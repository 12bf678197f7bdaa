// The KV event subscriber's thread: poll the SUB sockets, decode, check
// sequence numbers, replay or resync, and hand batches to the WORKERs the
// way NATS callbacks do (move into a message, anon_send, return).
#include "cluster/kv_subscriber.hpp"

#include <zmq.hpp>
#include <zmq_addon.hpp>

#include <algorithm>

#include "core/log.hpp"
#include "engines/kv_mirror.hpp"

namespace kvmesh {

expected<std::string> endpoint_of_rank(const std::string& endpoint,
                                       uint32_t rank) {
  const size_t colon = endpoint.rfind(':');
  const size_t scheme = endpoint.find("://");
  if (colon == std::string::npos || scheme == std::string::npos ||
      colon <= scheme + 2)
    return make_error(ec::invalid_argument,
                      "'" + endpoint + "' has no port (want tcp://HOST:PORT)");
  const std::string port = endpoint.substr(colon + 1);
  if (port.empty() || port.size() > 5 ||
      port.find_first_not_of("0123456789") != std::string::npos)
    return make_error(ec::invalid_argument,
                      "'" + endpoint + "' has no port (want tcp://HOST:PORT)");
  const unsigned long p = std::stoul(port) + rank;
  if (p == 0 || p > 65535)
    return make_error(ec::invalid_argument,
                      "'" + endpoint + "': the port of rank " +
                          std::to_string(rank) + " is beyond 65535");
  return endpoint.substr(0, colon + 1) + std::to_string(p);
}

namespace {

// The replay endpoint's end marker: -1 as 8 signed big-endian bytes.
constexpr uint64_t end_of_replay = UINT64_MAX;

std::string seq_bytes(uint64_t seq) {
  std::string s(8, '\0');
  for (int i = 7; i >= 0; --i) {
    s[static_cast<size_t>(i)] = static_cast<char>(seq & 0xff);
    seq >>= 8;
  }
  return s;
}

}  // namespace

struct kv_subscriber::impl {
  kv_subscriber_options opt;
  zmq::context_t ctx{1};
  std::vector<zmq::socket_t> subs;
  std::vector<std::unique_ptr<zmq::socket_t>> replayers;  // lazily made
  std::vector<kv_sequence> seqs;                          // per worker
  std::atomic<bool> stop{false};
  std::thread thread;
  mutable std::mutex mu;  // guards counters
  kv_subscriber_counters counters;

  void run();
  void on_message(size_t endpoint, std::vector<zmq::message_t>& frames);
  void apply(size_t worker, uint64_t seq, engine_kv_batch batch, bool from_sub);
  void resync(size_t worker, const char* why);
  // Asks rank `endpoint`'s replay socket for everything from `from`; the
  // (seq, batch) pairs it sent, in order. Empty when there is no replay
  // endpoint or it did not answer in time.
  std::vector<std::pair<uint64_t, engine_kv_batch>> replay(size_t endpoint,
                                                           uint64_t from,
                                                           bool* answered);
  // Replays from `from` for `worker` and applies what came, forgetting the
  // worker's cache first when the replay leaves a hole after `from` (not
  // for the `initial` replay of what happened before we listened).
  void close_gap(size_t endpoint, size_t worker, uint64_t from, bool initial);
};

namespace {

// Logs the kinds whose first fault happened since `before`.
void log_new(const kv_fault_counts& before, const kv_fault_counts& now) {
  for (size_t i = 0; i < kv_fault_count; ++i)
    if (before.n[i] == 0 && now.n[i] > 0)
      KVMESH_WARN(
          "kv subscriber skips %s: %s (counted from now on, logged "
          "once)",
          to_string(static_cast<kv_fault>(i)), now.first[i].c_str());
}

}  // namespace

void kv_subscriber::impl::apply(size_t worker, uint64_t seq,
                                engine_kv_batch batch, bool from_sub) {
  seqs[worker].applied(seq, from_sub);
  {
    std::lock_guard<std::mutex> g(mu);
    ++counters.messages;
  }
  caf::anon_send(opt.workers[worker], kv_atom::value, std::move(batch));
}

void kv_subscriber::impl::resync(size_t worker, const char* why) {
  {
    std::lock_guard<std::mutex> g(mu);
    ++counters.resyncs;
  }
  KVMESH_WARN("kv subscriber forgets worker rank %zu's cache: %s", worker, why);
  caf::anon_send(opt.workers[worker], kv_atom::value, drop_atom::value);
}

std::vector<std::pair<uint64_t, engine_kv_batch>> kv_subscriber::impl::replay(
    size_t endpoint, uint64_t from, bool* answered) {
  std::vector<std::pair<uint64_t, engine_kv_batch>> out;
  *answered = false;
  if (endpoint >= opt.replay.size() || opt.replay[endpoint].empty()) return out;
  auto& sock = replayers[endpoint];
  try {
    if (!sock) {
      // A DEALER, not a REQ: the engine answers one request with many
      // messages, which a REQ socket would refuse.
      sock = std::make_unique<zmq::socket_t>(ctx, zmq::socket_type::dealer);
      sock->set(zmq::sockopt::linger, 0);
      sock->connect(opt.replay[endpoint]);
    }
    const std::string start = seq_bytes(from);
    sock->send(zmq::message_t(), zmq::send_flags::sndmore);
    sock->send(zmq::buffer(start), zmq::send_flags::none);
    while (!stop) {
      zmq::pollitem_t item{static_cast<void*>(*sock), 0, ZMQ_POLLIN, 0};
      if (zmq::poll(&item, 1, opt.replay_timeout) == 0) {
        // Silence: a later answer would land in the next replay, so the
        // socket goes.
        sock.reset();
        return out;
      }
      std::vector<zmq::message_t> frames;
      if (!zmq::recv_multipart(*sock, std::back_inserter(frames))) continue;
      // [empty delimiter, sequence, payload]
      std::vector<std::string_view> views;
      for (size_t i = 1; i < frames.size(); ++i)
        views.emplace_back(static_cast<const char*>(frames[i].data()),
                           frames[i].size());
      kv_fault_counts before;
      expected<uint64_t> seq = make_error(ec::parse_error, "no frames");
      if (frames.size() == 3 && frames[0].size() == 0)
        seq = decode_kv_sequence(views[0]);
      if (seq && *seq == end_of_replay) {
        *answered = true;
        return out;
      }
      std::lock_guard<std::mutex> g(mu);
      before = counters.faults;
      if (!seq) {
        counters.faults.add(kv_fault::frames,
                            "a replayed message is not [\"\", seq, payload]");
      } else {
        auto b =
            decode_kv_batch(reinterpret_cast<const uint8_t*>(views[1].data()),
                            views[1].size(), counters.faults);
        if (b) out.emplace_back(*seq, std::move(*b));
      }
      log_new(before, counters.faults);
    }
  } catch (const zmq::error_t& e) {
    KVMESH_WARN("kv subscriber cannot replay from %s: %s",
                opt.replay[endpoint].c_str(), e.what());
    sock.reset();
  }
  return out;
}

void kv_subscriber::impl::close_gap(size_t endpoint, size_t worker,
                                    uint64_t from, bool initial) {
  bool answered = false;
  auto got = replay(endpoint, from, &answered);
  size_t i = 0;
  // What the replay holds before `from` was applied already.
  while (i < got.size() && got[i].first < from)
    ++i;
  if (i == got.size()) return;  // nothing: the caller sees the hole
  if (got[i].first == from) {
    if (!initial) {
      std::lock_guard<std::mutex> g(mu);
      ++counters.replays;
    }
  } else if (!initial) {
    // The engine's buffer no longer reaches back that far.
    resync(worker, "events were lost beyond the engine's replay buffer");
  }
  uint64_t last = got[i].first;
  for (bool first = true; i < got.size(); ++i, first = false) {
    if (!first && got[i].first != last + 1)
      resync(worker, "the replay skipped sequence numbers");
    last = got[i].first;
    apply(worker, got[i].first, std::move(got[i].second), false);
  }
}

void kv_subscriber::impl::on_message(size_t endpoint,
                                     std::vector<zmq::message_t>& frames) {
  std::vector<std::string_view> views;
  views.reserve(frames.size());
  for (auto& f : frames)
    views.emplace_back(static_cast<const char*>(f.data()), f.size());
  expected<engine_kv_message> m = make_error(ec::none, "");
  {
    std::lock_guard<std::mutex> g(mu);
    const kv_fault_counts before = counters.faults;
    m = decode_kv_message(views, counters.faults);
    log_new(before, counters.faults);
  }
  if (!m) return;
  const size_t n = opt.workers.size();
  // A batch that names one of our ranks goes to it (several ranks may
  // share one publisher); else the rank is the endpoint's.
  size_t w = endpoint;
  if (n > 1 && m->batch.has_rank && m->batch.rank >= 0 &&
      static_cast<uint64_t>(m->batch.rank) < n)
    w = static_cast<size_t>(m->batch.rank);
  kv_sequence& seq = seqs[w];
  auto verdict = seq.observe(m->seq);
  if (verdict == kv_sequence::restart) {
    {
      std::lock_guard<std::mutex> g(mu);
      ++counters.restarts;
    }
    resync(w, "the engine's publisher started over");
    seq.reset();
    verdict = kv_sequence::first;
  }
  if (verdict == kv_sequence::first) {
    // The replay buffer may hold what happened before we listened.
    if (m->seq > 0 && !opt.replay[endpoint].empty())
      close_gap(endpoint, w, 0, true);
  } else if (verdict == kv_sequence::gap) {
    {
      std::lock_guard<std::mutex> g(mu);
      ++counters.gaps;
    }
    const uint64_t from = seq.expected();
    KVMESH_WARN("kv subscriber lost events %llu..%llu of rank %zu%s",
                static_cast<unsigned long long>(from),
                static_cast<unsigned long long>(m->seq - 1), w,
                opt.replay[endpoint].empty() ? "" : ": asking for a replay");
    close_gap(endpoint, w, from, false);
    if (seq.expected() < m->seq)
      resync(w, opt.replay[endpoint].empty()
                    ? "events were lost and there is no replay endpoint"
                    : "events were lost and the replay did not bring them");
  }
  if (seq.started() && m->seq < seq.expected()) {
    seq.applied(m->seq, true);  // a replay brought it already
    return;
  }
  apply(w, m->seq, std::move(m->batch), true);
}

void kv_subscriber::impl::run() {
  std::vector<zmq::pollitem_t> items;
  for (auto& s : subs)
    items.push_back({static_cast<void*>(s), 0, ZMQ_POLLIN, 0});
  while (!stop) {
    try {
      if (zmq::poll(items, std::chrono::milliseconds(100)) <= 0) continue;
      for (size_t i = 0; i < items.size() && !stop; ++i) {
        if (!(items[i].revents & ZMQ_POLLIN)) continue;
        // Drain what is there: a burst is applied in order before the
        // next poll.
        for (int k = 0; k < 1024 && !stop; ++k) {
          std::vector<zmq::message_t> frames;
          if (!zmq::recv_multipart(subs[i], std::back_inserter(frames),
                                   zmq::recv_flags::dontwait))
            break;
          on_message(i, frames);
        }
      }
    } catch (const zmq::error_t& e) {
      if (stop) break;
      KVMESH_ERROR("kv subscriber: %s", e.what());
    }
  }
}

kv_subscriber::kv_subscriber(std::unique_ptr<impl> p) : impl_(std::move(p)) {}

kv_subscriber::~kv_subscriber() {
  impl_->stop = true;
  if (impl_->thread.joinable()) impl_->thread.join();
}

kv_subscriber_counters kv_subscriber::counters() const {
  std::lock_guard<std::mutex> g(impl_->mu);
  return impl_->counters;
}

expected<std::unique_ptr<kv_subscriber>> kv_subscriber::start(
    const kv_subscriber_options& opt) {
  if (opt.endpoints.empty())
    return make_error(ec::invalid_argument, "no KV event endpoint");
  if (opt.endpoints.size() != opt.workers.size())
    return make_error(ec::invalid_argument,
                      "one KV event endpoint per worker is needed");
  auto p = std::make_unique<impl>();
  p->opt = opt;
  p->opt.replay.resize(opt.endpoints.size());
  p->replayers.resize(opt.endpoints.size());
  p->seqs.resize(opt.workers.size());
  try {
    for (const auto& ep : opt.endpoints) {
      zmq::socket_t s(p->ctx, zmq::socket_type::sub);
      s.set(zmq::sockopt::linger, 0);
      // Slow consumers lose messages at the high-water mark: keep it as
      // high as the engines' publishers do, so sequence gaps stay rare.
      s.set(zmq::sockopt::rcvhwm, 100000);
      // A hostile or broken peer cannot make us hold more than this.
      s.set(zmq::sockopt::maxmsgsize, int64_t{64} << 20);
      s.set(zmq::sockopt::subscribe, opt.topic);
      s.connect(ep);
      p->subs.push_back(std::move(s));
    }
  } catch (const zmq::error_t& e) {
    return make_error(ec::invalid_argument,
                      std::string("KV event endpoint: ") + e.what());
  }
  impl* raw = p.get();
  p->thread = std::thread([raw] { raw->run(); });
  return std::unique_ptr<kv_subscriber>(new kv_subscriber(std::move(p)));
}

}  // namespace kvmesh
