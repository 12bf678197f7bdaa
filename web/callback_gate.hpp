// Waiting in a coroutine for a callback that another thread may call (the
// mesh's route, a tokenizer, an actor's answer): the coroutine resumes on
// its own executor, and a callback still pending when the server stops is
// dropped then, so that a late call is ignored instead of touching a dead
// server. Internal (C++20 coroutines on Boost.Asio).
#pragma once

#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <utility>
#include <vector>

#include <boost/asio/associated_executor.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/use_awaitable.hpp>

namespace kvmesh::web {

class callback_gate {
 public:
  struct slot {
    virtual ~slot() = default;
    virtual void drop() = 0;
  };

  // Tracks `s` until it completes or the gate closes; false when closed.
  bool add(const std::shared_ptr<slot>& s) {
    std::lock_guard<std::mutex> g(mu_);
    if (closed_) return false;
    // Forget the completed ones now and then.
    if (slots_.size() >= 64 && slots_.size() >= 2 * live_at_prune_) {
      std::vector<std::weak_ptr<slot>> keep;
      for (auto& w : slots_)
        if (!w.expired()) keep.push_back(std::move(w));
      slots_ = std::move(keep);
      live_at_prune_ = slots_.size();
    }
    slots_.push_back(s);
    return true;
  }
  // Drops every pending callback's coroutine; call once nothing runs the
  // executors any more, before they are destroyed.
  void close() {
    std::vector<std::weak_ptr<slot>> all;
    {
      std::lock_guard<std::mutex> g(mu_);
      closed_ = true;
      all.swap(slots_);
    }
    for (auto& w : all)
      if (auto s = w.lock()) s->drop();
  }

 private:
  std::mutex mu_;
  bool closed_ = false;
  std::vector<std::weak_ptr<slot>> slots_;
  size_t live_at_prune_ = 32;
};

namespace detail {

template <class T, class Handler>
class callback_slot : public callback_gate::slot {
 public:
  explicit callback_slot(Handler h) : handler_(std::move(h)) {}
  void drop() override {
    std::optional<Handler> h;  // destroyed after the lock is let go
    std::lock_guard<std::mutex> g(mu_);
    if (handler_) {
      h.emplace(std::move(*handler_));
      handler_.reset();
    }
  }
  // Resumes the coroutine on its executor, once; later calls do nothing.
  void complete(T v) {
    std::unique_lock<std::mutex> g(mu_);
    if (!handler_) return;
    auto ex = boost::asio::get_associated_executor(*handler_);
    if (armed_ && on_thread_of(ex)) {
      // A call from the coroutine's own thread after it waits (a NATS
      // message read on its loop): resumed here, not behind everything
      // the loop has queued meanwhile.
      Handler h = std::move(*handler_);
      handler_.reset();
      g.unlock();
      std::move(h)(std::move(v));
      return;
    }
    // Posted under the lock, so that drop() (the server's end) waits for
    // the post to be queued before the executor goes.
    boost::asio::post(ex,
                      [h = std::move(*handler_), v = std::move(v)]() mutable {
                        std::move(h)(std::move(v));
                      });
    handler_.reset();
  }
  // The call has started: a completion from now on is not within it.
  void arm() {
    std::lock_guard<std::mutex> g(mu_);
    armed_ = true;
  }

 private:
  // Whether this thread runs the io_context behind `ex` (false for any
  // other kind of executor: then the call is posted).
  template <class Executor>
  static bool on_thread_of(const Executor& ex) {
    using plain = boost::asio::io_context::executor_type;
    using tracked = decltype(boost::asio::prefer(
        std::declval<plain>(),
        boost::asio::execution::outstanding_work.tracked));
    if (const auto* e = ex.template target<plain>())
      return e->running_in_this_thread();
    if (const auto* e = ex.template target<tracked>())
      return e->running_in_this_thread();
    return false;
  }

  std::mutex mu_;
  std::optional<Handler> handler_;
  bool armed_ = false;
};

}  // namespace detail

// What starts the call: it is handed `done`.
template <class T>
using callback_start = std::function<void(std::function<void(T)>)>;

// Calls start(done) and waits for done(T). `start` must call done at most
// once (a second call is ignored); if it never does, the coroutine waits
// until the gate closes. `start` is a named object of the caller's (it is
// called when the result is awaited): GCC 12 miscompiles a capturing lambda
// made in the same expression as a co_await (a double free), so callers
// build it in a plain function, never in the coroutine.
template <class T>
boost::asio::awaitable<T> await_callback(callback_gate& gate,
                                         const callback_start<T>& start) {
  return boost::asio::async_initiate<const boost::asio::use_awaitable_t<>&,
                                     void(T)>(
      [g = &gate, s = &start](auto handler) {
        using slot_t = detail::callback_slot<T, decltype(handler)>;
        auto slot = std::make_shared<slot_t>(std::move(handler));
        if (!g->add(slot)) {
          slot->drop();
          return;
        }
        (*s)(std::function<void(T)>(
            [slot](T v) { slot->complete(std::move(v)); }));
        slot->arm();
      },
      boost::asio::use_awaitable);
}

}  // namespace kvmesh::web
