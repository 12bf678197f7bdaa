// The gateway's series (metrics.hpp).
#include "gateway/metrics.hpp"

#include <memory>

#include "gateway/local_tokenizer.hpp"

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
           take(reg.add_histogram(
                    "kvmesh_gateway_tokenize_seconds",
                    "Time the prompt's tokenizer took, by path: the "
                    "engine's POST /tokenize or the in-process tokenizer",
                    latency_bounds(), {"path"}),
                m->tokenize_),
           take(reg.add_counter(
                    "kvmesh_gateway_tokenize_handoffs_total",
                    "Prompts the in-process tokenizer left to the engine's, "
                    "by reason",
                    {"reason"}),
                m->handoffs_),
           take(reg.add_counter(
                    "kvmesh_gateway_prompt_tokens_total",
                    "Prompt tokens of the requests routed, by where they "
                    "came from: given as ids, the in-process tokenizer, an "
                    "engine, or estimated from the text's size",
                    {"source"}),
                m->prompt_tokens_),
           take(reg.add_gauge("kvmesh_gateway_requests_in_flight",
                              "Completion requests being served"),
                in_flight),
           take(reg.add_gauge("kvmesh_gateway_model_requests_in_flight",
                              "Completion requests being served, by the "
                              "model (pool) they named",
                              {"model"}),
                m->model_in_flight_),
       })
    if (!s) return s.err();
  // Every path and reason at 0 from the start.
  for (const char* path : {"engine", "local"})
    if (auto h = m->tokenize_->with({path}); !h) return h.err();
  for (const char* reason : handoff_reasons)
    if (auto c = m->handoffs_->with({reason}); !c) return c.err();
  for (const char* source : {"given", "local", "engine", "estimated"})
    if (auto c = m->prompt_tokens_->with({source}); !c) return c.err();
  for (status s :
       {take(reroutes->with({}), m->reroutes_), take(ttfb->with({}), m->ttfb_),
        take(route->with({}), m->route_),
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

void gateway_metrics::tokenized(const char* path, double seconds) {
  if (auto h = tokenize_->with({path})) metrics::observe(**h, seconds);
}

void gateway_metrics::handoff(const std::string& reason) {
  if (auto c = handoffs_->with({reason})) (*c)->Increment();
}

metrics::gauge* gateway_metrics::model_in_flight(const std::string& model) {
  auto g = model_in_flight_->with({model});
  return g ? *g : nullptr;
}

void gateway_metrics::prompt(const char* source, uint32_t tokens) {
  if (auto c = prompt_tokens_->with({source})) (*c)->Increment(tokens);
}

}  // namespace kvmesh::gateway
