// A deterministic actor system for tests: CAF's test coordinator, driven
// from GoogleTest, plus helpers to ask an actor and collect the answer.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <optional>
#include <vector>

#include "actors/actors.hpp"

namespace kvmesh::test {

class actor_fixture : public ::testing::Test {
 protected:
  actor_fixture();
  ~actor_fixture() override;

  // Runs every ready job; returns how many ran.
  size_t run() { return sched->run(); }
  // Advances the clock by `d` one due message at a time, running the
  // actors after each, so that what they schedule meanwhile (an engine's
  // next step) also fires at its own time within `d`.
  void advance(caf::timespan d);

  // Sends `xs` to `dest` as a request from a fresh actor and runs until
  // idle; the reply (or error) lands in the returned slot.
  template <class T, class Dest, class... Ts>
  std::shared_ptr<std::optional<caf::expected<T>>> ask(const Dest& dest,
                                                       Ts... xs) {
    auto slot = std::make_shared<std::optional<caf::expected<T>>>();
    sys->spawn([=](caf::event_based_actor* self) {
      self->request(dest, caf::infinite, xs...)
          .then([=](const T& x) { *slot = x; },
                [=](caf::error& e) { *slot = caf::expected<T>{e}; });
    });
    run();
    return slot;
  }

  // Calls `dest` for bids with a gather of one slot, as a node agent calls
  // its workers, from a fresh actor, and runs until idle; what that actor
  // was told, (tag, the gather's bids), once per telling.
  template <class Dest>
  std::vector<std::pair<uint64_t, bid_list>> call_bids(const Dest& dest,
                                                       call_for_bids cfb,
                                                       uint64_t tag) {
    auto got = std::make_shared<std::vector<std::pair<uint64_t, bid_list>>>();
    sys->spawn([=](caf::event_based_actor* self) -> caf::behavior {
      auto g = std::make_shared<bid_gather>(
          1, caf::actor_cast<caf::actor_addr>(self), tag);
      self->send(caf::actor_cast<caf::actor>(dest), bid_atom::value, cfb, g);
      return {[=](bid_atom, uint64_t t) {
        bid_list l;
        g->collect(l.bids);
        got->emplace_back(t, std::move(l));
      }};
    });
    run();
    return *got;
  }

  // Actors under test: they get an exit message at teardown, which breaks
  // the reference cycles that held promises and handles can form.
  template <class Handle>
  Handle track(Handle h) {
    tracked_.push_back(caf::actor_cast<caf::actor_addr>(h));
    return h;
  }

  std::vector<caf::actor_addr> tracked_;
  caf::actor_system_config cfg;
  std::unique_ptr<caf::actor_system> sys;
  caf::scheduler::test_coordinator* sched = nullptr;
};

}  // namespace kvmesh::test
