// The deterministic actor-test fixture.
#include "fixture.hpp"

namespace kvmesh::test {

actor_fixture::actor_fixture() {
  register_types(cfg);
  cfg.set("scheduler.policy", caf::atom("testing"));
  sys = std::make_unique<caf::actor_system>(cfg);
  sched = &dynamic_cast<caf::scheduler::test_coordinator&>(sys->scheduler());
}

void actor_fixture::advance(caf::timespan d) {
  auto& clock = sched->clock();
  const auto target = clock.current_time + d;
  run();
  while (!clock.schedule().empty() &&
         clock.schedule().begin()->first <= target) {
    clock.trigger_timeout();
    run();
  }
  clock.current_time = target;
}

actor_fixture::~actor_fixture() {
  // Held promises and handles can form reference cycles, pending delayed
  // messages (an engine's next step, a router's next tick) keep actors
  // alive, and the system waits for every actor on shutdown: stop the
  // actors under test, then play out what is left.
  for (auto& addr : tracked_)
    caf::anon_send_exit(addr, caf::exit_reason::user_shutdown);
  tracked_.clear();
  for (int i = 0; i < 100000; ++i)
    if (sched->run() == 0 && sched->trigger_timeouts() == 0) break;
}

}  // namespace kvmesh::test
