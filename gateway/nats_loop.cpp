// libnats' external event loop on an Asio io_context: libnats asks for read
// and write interest from any of its threads; the state below is touched
// only on the io_context's thread, where those requests are carried out.
#include "gateway/nats_loop.hpp"

#include <nats/nats.h>
#include <unistd.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>

#include "cluster/msg_batch.hpp"

namespace kvmesh::gateway {

namespace asio = boost::asio;

struct nats_loop::state : std::enable_shared_from_this<nats_loop::state> {
  explicit state(asio::io_context& c) : io(c) {}
  asio::io_context& io;
  natsConnection* nc = nullptr;
  // A duplicate of libnats' socket: libnats closes its own descriptor when
  // the connection drops, while a wait on this one may still be queued;
  // the duplicate keeps the socket (and its number) ours until we let go.
  std::unique_ptr<asio::posix::stream_descriptor> fd;
  uint64_t generation = 0;  // bumped per attach: older waits are stale
  bool want_read = false;
  bool reading = false;  // a read wait is queued
  bool want_write = false;
  bool writing = false;  // a write is posted or a write wait queued
  // A write held back so that the messages published meanwhile go with it
  // (publish's may_wait); the hold lasts at most the first one's wait.
  std::unique_ptr<asio::steady_timer> hold;
  bool holding = false;
  std::chrono::milliseconds may_wait{0};  // of the publish under way
  bool closed = false;
  struct sub {
    natsSubscription* sub = nullptr;
    handler h;
  };
  std::vector<sub> subs;
  nats_msg_batch done;  // messages handled

  // Runs `f` on io's thread: now when called there, else posted.
  template <class F>
  void on_loop(F f) {
    if (io.get_executor().running_in_this_thread()) {
      f();
    } else {
      asio::post(io, std::move(f));
    }
  }

  void arm_read() {
    if (reading || !want_read || !fd || closed) return;
    reading = true;
    fd->async_wait(asio::posix::descriptor_base::wait_read,
                   [self = shared_from_this(),
                    g = generation](const boost::system::error_code& ec) {
                     if (g != self->generation) return;
                     self->reading = false;
                     if (!ec) self->on_readable();
                   });
  }

  void on_readable() {
    if (closed || !want_read || !nc) return;
    natsConnection_ProcessReadEvent(nc);
    deliver();
    // libnats reads once per event, as a level-triggered loop expects.
    // Asio's epoll is edge-triggered, but a wait re-registers the socket
    // (EPOLL_CTL_MOD), which reports bytes still unread at once.
    arm_read();
  }

  // Hands what the read queued on each subscription to its handler.
  void deliver() {
    for (auto& s : subs) {
      int n = 0;
      if (natsSubscription_GetPending(s.sub, &n, nullptr) != NATS_OK) continue;
      for (; n > 0; --n) {
        natsMsg* m = nullptr;
        if (natsSubscription_NextMsg(&m, s.sub, 0) != NATS_OK) break;
        const char* data = natsMsg_GetData(m);
        const int len = natsMsg_GetDataLength(m);
        s.h(natsMsg_GetSubject(m), reinterpret_cast<const uint8_t*>(data),
            len > 0 ? static_cast<size_t>(len) : 0);
        done.destroy(m);
      }
    }
  }

  // Writes what libnats buffered. Posted rather than written in the
  // caller's stack: libnats asks for it under its lock, in the middle of
  // a publish, and several publishes of one handler go out in one write.
  void start_write() {
    if (writing || !want_write || closed) return;
    if (may_wait.count() > 0) {
      hold_write(may_wait);
      return;
    }
    holding = false;
    writing = true;
    asio::post(io, [self = shared_from_this(), g = generation] {
      if (g != self->generation) return;
      self->writing = false;
      self->on_writable();
    });
  }

  void hold_write(std::chrono::milliseconds wait) {
    if (holding) return;
    holding = true;
    if (!hold) hold = std::make_unique<asio::steady_timer>(io);
    hold->expires_after(wait);
    hold->async_wait(
        [self = shared_from_this()](const boost::system::error_code& ec) {
          if (ec || !self->holding) return;
          self->holding = false;
          self->start_write();
        });
  }

  // A publish that may not wait: what is held goes now, with it.
  void release_hold() {
    if (!holding) return;
    holding = false;
    hold->cancel();
    start_write();
  }

  void on_writable() {
    if (closed || !want_write || !nc) return;
    natsConnection_ProcessWriteEvent(nc);
    // Still wanted: the socket took part of it; wait until it drains.
    if (!want_write || !fd || writing) return;
    writing = true;
    fd->async_wait(asio::posix::descriptor_base::wait_write,
                   [self = shared_from_this(),
                    g = generation](const boost::system::error_code& ec) {
                     if (g != self->generation) return;
                     self->writing = false;
                     if (!ec) self->on_writable();
                   });
  }

  // Lets go of our duplicate of the socket; waits queued on it end.
  void drop_fd() {
    if (fd) {
      boost::system::error_code ignored;
      fd->close(ignored);
    }
    fd.reset();
  }

  void attach(int dup_fd) {
    ++generation;
    reading = writing = holding = false;
    if (hold) hold->cancel();
    drop_fd();
    if (closed) {
      ::close(dup_fd);
      return;
    }
    fd = std::make_unique<asio::posix::stream_descriptor>(io, dup_fd);
    want_read = true;  // an attach starts reading (as libnats' adapters do)
    arm_read();
    start_write();
  }
};

namespace {

// libnats' callbacks; `loop` and `user` are the state's holder.
using holder = std::shared_ptr<nats_loop::state>;

natsStatus on_attach(void** user, void* loop, natsConnection* nc,
                     natsSock sock) {
  auto* h = static_cast<holder*>(loop);
  *user = h;
  // Duplicated now, while libnats' descriptor is surely this socket.
  const int copy = ::dup(sock);
  if (copy < 0) return NATS_SYS_ERROR;
  auto st = *h;
  st->on_loop([st, nc, copy] {
    st->nc = nc;
    st->attach(copy);
  });
  return NATS_OK;
}

natsStatus on_read(void* user, bool add) {
  auto st = *static_cast<holder*>(user);
  st->on_loop([st, add] {
    st->want_read = add;
    if (add) st->arm_read();
  });
  return NATS_OK;
}

natsStatus on_write(void* user, bool add) {
  auto st = *static_cast<holder*>(user);
  st->on_loop([st, add] {
    st->want_write = add;
    if (add) st->start_write();
  });
  return NATS_OK;
}

natsStatus on_detach(void* user) {
  auto st = *static_cast<holder*>(user);
  st->on_loop([st] {
    st->want_read = st->want_write = false;
    ++st->generation;
    st->drop_fd();
  });
  return NATS_OK;
}

}  // namespace

expected<std::unique_ptr<nats_loop>> nats_loop::connect(const nats_options& opt,
                                                        asio::io_context& io) {
  if (asks_tls(opt))
    return make_error(ec::invalid_argument,
                      "a NATS connection on the gateway's own loop cannot "
                      "use TLS");
  auto made = make_nats_options(opt);
  if (!made) return made.err();
  natsOptions* o = *made;
  std::unique_ptr<nats_loop> loop(new nats_loop());
  loop->st_ = std::make_shared<state>(io);
  // libnats holds this pointer until the connection is destroyed (below,
  // in the destructor, which frees it after).
  auto* h = new holder(loop->st_);
  natsStatus s =
      natsOptions_SetEventLoop(o, h, on_attach, on_read, on_write, on_detach);
  natsConnection* nc = nullptr;
  if (s == NATS_OK) s = natsConnection_Connect(&nc, o);
  if (s != NATS_OK) {
    error e = nats_connect_error(s, opt);
    natsOptions_Destroy(o);
    if (nc) natsConnection_Destroy(nc);
    delete h;
    return e;
  }
  natsOptions_Destroy(o);
  loop->st_->nc = nc;
  loop->holder_ = h;
  return loop;
}

nats_loop::~nats_loop() {
  if (!st_) return;
  natsConnection* nc = st_->nc;
  if (nc) natsConnection_Close(nc);
  for (auto& s : st_->subs)
    natsSubscription_Destroy(s.sub);
  st_->subs.clear();
  st_->done.flush();
  if (nc) natsConnection_Destroy(nc);
  // No libnats callback comes after Destroy; the waits still queued on io
  // see `closed` (or are destroyed with io, unrun).
  st_->closed = true;
  st_->nc = nullptr;
  st_->drop_fd();
  st_->hold.reset();
  delete static_cast<holder*>(holder_);
}

status nats_loop::subscribe(const std::string& subject, handler h) {
  natsSubscription* sub = nullptr;
  natsStatus s = natsConnection_SubscribeSync(&sub, st_->nc, subject.c_str());
  if (s != NATS_OK)
    return make_error(ec::io_error, "NATS subscribe " + subject + ": " +
                                        natsStatus_GetText(s));
  st_->subs.push_back(state::sub{sub, std::move(h)});
  return ok;
}

status nats_loop::publish(const std::string& subject,
                          const std::vector<uint8_t>& payload,
                          const std::string& reply,
                          std::chrono::milliseconds may_wait) {
  const int len = static_cast<int>(payload.size());
  // libnats asks for the write (on_write) inside the publish, when its
  // buffer was empty; that ask reads may_wait.
  st_->may_wait = may_wait;
  const natsStatus s =
      reply.empty()
          ? natsConnection_Publish(st_->nc, subject.c_str(), payload.data(),
                                   len)
          : natsConnection_PublishRequest(st_->nc, subject.c_str(),
                                          reply.c_str(), payload.data(), len);
  st_->may_wait = std::chrono::milliseconds(0);
  if (may_wait.count() == 0) st_->release_hold();
  if (s != NATS_OK)
    return make_error(ec::io_error,
                      "NATS publish " + subject + ": " + natsStatus_GetText(s));
  return ok;
}

bool nats_loop::connected() const {
  return st_->nc &&
         natsConnection_Status(st_->nc) == NATS_CONN_STATUS_CONNECTED;
}

}  // namespace kvmesh::gateway
