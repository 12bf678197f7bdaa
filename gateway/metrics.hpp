// The gateway's Prometheus series, registered in a metrics::registry:
// requests by route and status, re-routes, bad requests by reason, time to
// first byte, route latency, tokenize latency by path (the engine's, the
// in-process one) and the prompts the in-process one handed to the engine,
// prompt tokens routed by where they came from, requests in flight (all,
// and by model).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "core/error.hpp"
#include "metrics/registry.hpp"

namespace kvmesh::gateway {

class gateway_metrics {
 public:
  // Registers the families in `reg` (which outlives this). Errors: a name
  // already registered there.
  static expected<std::unique_ptr<gateway_metrics>> make(
      metrics::registry& reg);

  // route: chat_completions, completions, models, health, other.
  void request(const std::string& route, int status);
  // reason: not_json, missing_field, wrong_type, bad_value, body_too_large,
  // bad_request_id, bad_http, unknown_model, tokenize_refused.
  void bad_request(const std::string& reason);
  void reroute() { reroutes_->Increment(); }
  void first_byte(double seconds) { metrics::observe(*ttfb_, seconds); }
  void routed(double seconds) { metrics::observe(*route_, seconds); }
  // path: engine, local.
  void tokenized(const char* path, double seconds);
  // reason: one of local_tokenizer.hpp's handoff_reasons.
  void handoff(const std::string& reason);
  // A routed prompt's size; source: given (token ids), local, engine,
  // estimated (no tokenizer answered).
  void prompt(const char* source, uint32_t tokens);
  metrics::gauge& in_flight() { return *in_flight_; }
  // The gauge of `model`'s requests in flight: a model the mesh serves
  // (the label's values stay as few as the pools). Null if refused.
  metrics::gauge* model_in_flight(const std::string& model);

 private:
  gateway_metrics() = default;
  metrics::family<metrics::counter>* requests_ = nullptr;
  metrics::family<metrics::counter>* bad_ = nullptr;
  metrics::counter* reroutes_ = nullptr;
  metrics::histogram* ttfb_ = nullptr;
  metrics::histogram* route_ = nullptr;
  metrics::family<metrics::histogram>* tokenize_ = nullptr;
  metrics::family<metrics::counter>* handoffs_ = nullptr;
  metrics::family<metrics::counter>* prompt_tokens_ = nullptr;
  metrics::gauge* in_flight_ = nullptr;
  metrics::family<metrics::gauge>* model_in_flight_ = nullptr;
};

}  // namespace kvmesh::gateway
