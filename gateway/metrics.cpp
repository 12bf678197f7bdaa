// The gateway's series (metrics.hpp).
#include "gateway/metrics.hpp"

#include <memory>

namespace kvmesh::gateway {

namespace {

// Seconds: a loopback hop is well under a millisecond, a queued prefill of
// a long prompt takes seconds.
std::vector<double> latency_bounds() {
  return {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
          0.25,   0.5,   1,      2.5,   5,    10,    30,   60};
}

template <class T>
status take(expected<T*> x, T*& out) {
  if (!x) return x.err();
  out = *x;
  return ok;
}

}  // namespace

expected<std::unique_ptr<gateway_metrics>> gateway_metrics::make(
    metrics::registry& reg) {
  std::unique_ptr<gateway_metrics> m(new gateway_metrics);
  metrics::family<metrics::counter>* reroutes = nullptr;
  metrics::family<metrics::histogram>* ttfb = nullptr;
  metrics::family<metrics::histogram>* route = nullptr;
  metrics::family<metrics::histogram>* tokenize = nullptr;
  metrics::family<metrics::gauge>* in_flight = nullptr;
  for (status s : {
           take(reg.add_counter("kvmesh_gateway_requests_total",
                                "HTTP requests answered, by route and status",
                                {"route", "code"}),
                m->requests_),
           take(reg.add_counter(
                    "kvmesh_gateway_reroutes_total",
                    "Requests routed again after their worker failed before "
                    "its first byte"),
                reroutes),
           take(reg.add_counter("kvmesh_gateway_bad_requests_total",
                                "Requests refused as the client's mistake, "
                                "by reason",
                                {"reason"}),
                m->bad_),
           take(reg.add_histogram(
                    "kvmesh_gateway_time_to_first_byte_seconds",
                    "From a request's arrival to the first byte of its "
                    "worker's answer",
                    latency_bounds()),
                ttfb),
           take(reg.add_histogram("kvmesh_gateway_route_seconds",
                                  "Time the mesh took to route a request",
                                  latency_bounds()),
                route),
           take(reg.add_histogram("kvmesh_gateway_tokenize_seconds",
                                  "Time the prompt's tokenizer took",
                                  latency_bounds()),
                tokenize),
           take(reg.add_gauge("kvmesh_gateway_requests_in_flight",
                              "Completion requests being served"),
                in_flight),
       })
    if (!s) return s.err();
  for (status s :
       {take(reroutes->with({}), m->reroutes_), take(ttfb->with({}), m->ttfb_),
        take(route->with({}), m->route_),
        take(tokenize->with({}), m->tokenize_),
        take(in_flight->with({}), m->in_flight_)})
    if (!s) return s.err();
  return expected<std::unique_ptr<gateway_metrics>>(std::move(m));
}

void gateway_metrics::request(const std::string& route, int status) {
  if (auto c = requests_->with({route, std::to_string(status)}))
    (*c)->Increment();
}

void gateway_metrics::bad_request(const std::string& reason) {
  if (auto c = bad_->with({reason})) (*c)->Increment();
}

}  // namespace kvmesh::gateway
