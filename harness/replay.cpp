// The trace replay through the mesh, with its tally of errors and queues.
#include "harness/replay.hpp"

#include <caf/all.hpp>

#include <algorithm>
#include <atomic>
#include <future>
#include <thread>

#include "actors/replay.hpp"
#include "actors/router.hpp"
#include "cluster/bridge.hpp"

namespace kvmesh::harness {

namespace {

// A ROUTER in front of another that counts why route requests fail: the
// replay only counts that they did.
struct tally_state {
  static inline const char* name = "bench_tally";
  router_actor next;
  std::shared_ptr<error_counts> errors;
};

router_actor::behavior_type tally_router(
    router_actor::stateful_pointer<tally_state> self, router_actor next,
    std::shared_ptr<error_counts> errors) {
  self->state.next = std::move(next);
  self->state.errors = std::move(errors);
  return {
      [=](route_atom, route_request_msg& r) -> caf::result<decision> {
        auto rp = self->make_response_promise<decision>();
        self->request(self->state.next, caf::infinite, route_atom::value,
                      std::move(r))
            .then([rp](decision& d) mutable { rp.deliver(std::move(d)); },
                  [self, rp](caf::error& e) mutable {
                    ++(*self->state.errors)[error_kind(describe(e))];
                    rp.deliver(std::move(e));
                  });
        return rp;
      },
      [=](get_atom, weights_atom) -> caf::result<price_config> {
        return self->delegate(self->state.next, get_atom::value,
                              weights_atom::value);
      },
      [=](put_atom, weights_atom, const price_config&) {},
      [=](status_atom) -> caf::result<router_status> {
        return self->delegate(self->state.next, status_atom::value);
      },
      [=](put_atom, workers_atom, const worker_status&, bidder_actor) {},
      [=](drop_atom, workers_atom, uint32_t) {},
      [=](put_atom, answered_atom, const bidder_actor&, const std::string&) {},
      [=](put_atom, shards_atom, std::vector<index_shard_actor>&) {},
      [=](tick_atom) {},
      [=](sweep_atom) {},
  };
}

// Asks the ADMIN for every worker's queued work when a sample is due by
// `now_ms()` (the replay's clock) and records it in `sampler`. Slots that
// pass while the call takes its time are skipped rather than given the
// same values; a failed call records nothing.
template <class Clock>
void sample_queues(nats_bus& bus, const subjects& subj, uint32_t workers,
                   Clock now_ms, queued_sampler& sampler) {
  if (sampler.next_ms() > now_ms()) return;
  auto r =
      admin_request_call(bus, subj, "workers", admin_request{}, admin_timeout);
  if (r && r->error.empty()) {
    std::vector<double> queued(workers, 0);
    for (const worker_status& w : r->workers)
      if (w.worker < workers && !w.gone) queued[w.worker] = w.queued;
    sampler.add(queued);
  }
  sampler.skip_to(now_ms());
}

}  // namespace

expected<trace_run> replay_trace(
    nats_bus& bus, const replay_run_options& o,
    std::shared_ptr<const std::vector<trace_request>> trace, child_mesh& m,
    queued_sampler* sampler, scatter_gather_rounds* rounds) {
  caf::actor_system_config sys_cfg;
  register_types(sys_cfg);
  tune_for_latency(sys_cfg);
  caf::actor_system sys{sys_cfg};
  auto promise = std::make_shared<std::promise<sim_result>>();
  auto result = promise->get_future();
  replay_options ro;
  ro.trace = trace;
  ro.workers = o.workers;
  ro.speedup = o.speedup;
  ro.time_scale = o.time_scale;
  ro.done = promise;
  auto client = sys.spawn(replay, ro);
  mesh_options mo;
  mo.subj.prefix = o.prefix;
  mo.heartbeat = std::chrono::milliseconds(o.heartbeat_ms);
  auto remote = spawn_remote_router(sys, bus, mo,
                                    caf::actor_cast<listener_actor>(client));
  auto errors = std::make_shared<error_counts>();
  router_actor front;
  if (remote) front = sys.spawn(tally_router, *remote, errors);
  auto stop = [&] {
    caf::anon_send_exit(client, caf::exit_reason::user_shutdown);
    if (remote) caf::anon_send_exit(*remote, caf::exit_reason::user_shutdown);
    if (front) caf::anon_send_exit(front, caf::exit_reason::user_shutdown);
    sys.await_all_actors_done();
  };
  if (!remote) {
    stop();
    return make_error(remote.err().code,
                      "remote router: " + remote.err().message);
  }
  trace_run run;
  run.start = steady::now();
  // One handle is enough: whichever router of the queue group NATS picks
  // takes each request.
  caf::anon_send(client, start_atom::value, std::vector<router_actor>{front});
  // The rounds keep the replay's clock (arrivals over speedup, on the wall
  // time_scale times faster) from its start on a thread of their own.
  std::atomic<bool> stopping{false};
  std::thread pacer;
  if (rounds)
    pacer = std::thread([&] {
      for (const trace_request& t : *trace) {
        const auto at =
            run.start + std::chrono::duration_cast<steady::duration>(
                            std::chrono::duration<double, std::milli>(
                                t.arrival_ms / o.speedup / o.time_scale));
        while (!stopping && steady::now() < at)
          std::this_thread::sleep_until(
              std::min(at, steady::now() + std::chrono::milliseconds(50)));
        if (stopping) return;
        rounds->start();
      }
    });
  auto stop_rounds = [&] {
    stopping = true;
    if (pacer.joinable()) pacer.join();
  };
  const auto deadline =
      run.start + std::chrono::duration_cast<steady::duration>(
                      std::chrono::duration<double>(o.timeout_s));
  subjects subj;
  subj.prefix = o.prefix;
  while (result.wait_for(std::chrono::seconds(0)) !=
         std::future_status::ready) {
    std::string why = watch(m, 50);
    // The replay's clock starts with the run and runs time_scale times
    // faster than the wall's.
    if (why.empty() && sampler)
      sample_queues(
          bus, subj, o.workers,
          [&] {
            return seconds(steady::now() - run.start) * 1e3 * o.time_scale;
          },
          *sampler);
    if (why.empty() && steady::now() > deadline)
      why = "the replay did not end within " + arg(o.timeout_s) +
            " s (--timeout): requests or their events were lost";
    if (!why.empty()) {
      stop_rounds();
      stop();
      return make_error(ec::io_error, why);
    }
  }
  run.end = steady::now();
  stop_rounds();
  run.result = result.get();
  stop();  // the tally is done: it may be read
  run.errors = *errors;
  return run;
}

}  // namespace kvmesh::harness
