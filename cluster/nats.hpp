// A NATS connection for kvmesh: publish, subscribe (with queue groups) and
// request/reply over libnats, with reconnects and statuses as values.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "core/secret.hpp"

struct __natsConnection;
struct __natsSubscription;
struct __natsOptions;

namespace kvmesh {

// A message as a subscriber sees it: copied out of libnats, so that it can
// outlive the callback (NATS payloads are not aligned; decoders copy again
// into words).
struct nats_message {
  std::string subject;
  std::string reply;  // empty unless the sender awaits an answer
  std::vector<uint8_t> payload;
};

// Runs on a libnats thread: it must not block (actors: anon_send and
// return).
using nats_handler = std::function<void(nats_message)>;

struct nats_options {
  // One URL, or a comma-separated list of a cluster's servers.
  std::string url = "nats://127.0.0.1:4222";
  std::string name = "kvmesh";
  int max_reconnect = -1;  // forever
  int64_t reconnect_wait_ms = 250;
  // Published while disconnected are buffered up to this many bytes.
  int reconnect_buffer_bytes = 8 << 20;
  int64_t connect_timeout_ms = 2000;
  int64_t drain_timeout_ms = 2000;
  // Send each publish at once (latency) rather than batching them for up to
  // a millisecond (fewer system calls).
  bool send_asap = true;
  // Connect to the servers of a list in random order (spreads clients over
  // a cluster) or in the order given.
  bool randomize = true;

  // Credentials: at most one way of the four (user and password, token,
  // nkey and its seed file, creds file); none when the server has no
  // authorization. Never logged.
  std::string user;
  std::string password;
  std::string token;
  // A user nkey: the public key ("U...", what the server lists) and the
  // file holding its seed ("SU...", which signs the server's challenge).
  std::string nkey;
  std::string nkey_seed_file;
  std::string creds_file;  // a user JWT and its seed (nsc, nats CLI)
  // TLS: required when `tls` is set or any file is given (a tls:// URL
  // asks for it too). The CA verifies the server; the certificate and key
  // are this client's, for servers that verify clients.
  bool tls = false;
  std::string tls_ca_file;
  std::string tls_cert_file;
  std::string tls_key_file;
};

// What is wrong with the credential and TLS settings (both halves of a pair,
// one way of authenticating, readable files), naming the config keys; ok
// when they can be tried on a server.
status check_security(const nats_options& opt);

// Whether the connection asks for TLS (a setting or a tls:// URL).
bool asks_tls(const nats_options& opt);

// libnats options for `opt` (servers, credentials, TLS, timeouts, no
// callbacks), for a connection made beside nats_bus (the gateway's, on its
// own event loop); the caller destroys them. The error names the setting.
expected<__natsOptions*> make_nats_options(const nats_options& opt);
// natsConnection_Connect's failure `status` as an error saying what to
// change; call it before anything else touches libnats on this thread.
error nats_connect_error(int status, const nats_options& opt);

class nats_bus {
 public:
  // Connects; an unreachable server or a malformed URL is an error value
  // naming the URL and libnats' status text.
  static expected<std::unique_ptr<nats_bus>> connect(const nats_options& opt);

  // Drains (pending messages are delivered and sent) and closes.
  ~nats_bus();
  nats_bus(const nats_bus&) = delete;
  nats_bus& operator=(const nats_bus&) = delete;

  status publish(const std::string& subject,
                 const std::vector<uint8_t>& payload,
                 const std::string& reply = {});
  // Subscribes to `subject`; with a non-empty `queue`, the members of that
  // queue group share the messages (each goes to one of them). Returns an
  // id for unsubscribe(). `max_pending` bounds the messages libnats holds
  // for the handler (messages, payload bytes; 0: libnats' default, 65,536
  // and 64 MiB): past it they are dropped and counted as a slow consumer.
  expected<uint64_t> subscribe(const std::string& subject,
                               const std::string& queue, nats_handler h,
                               std::pair<uint64_t, uint64_t> max_pending = {});
  status unsubscribe(uint64_t id);
  // Answers a message on its reply subject, only when that is an inbox
  // (_INBOX.>): the asker chooses the reply subject, and a process that
  // answered anywhere would publish, with its own permissions, where the
  // asker may not (a client's "reply" on an agent's drain subject). Any
  // other subject is refused: counted (refused_replies), logged, an error.
  status publish_reply(const std::string& reply,
                       const std::vector<uint8_t>& payload);
  // Sends and waits for one reply.
  expected<std::vector<uint8_t>> request(const std::string& subject,
                                         const std::vector<uint8_t>& payload,
                                         std::chrono::milliseconds timeout);
  // Waits until the server has seen everything published so far.
  status flush(std::chrono::milliseconds timeout);
  // As flush(), and an error when the server refused a publish or a
  // subscription on `subject` (its Permissions Violation comes before the
  // flush's answer): a subscription that cannot receive, said at once
  // rather than as a timeout later. The error is the caller's to report:
  // a refusal of `subject` is not logged (it is counted).
  status confirm(const std::string& subject, std::chrono::milliseconds timeout);

  // The libnats connection, for layers built on it (cluster/jetstream) that
  // need calls nats_bus does not wrap; it stays owned by this object.
  __natsConnection* native() const { return conn_; }

  // Messages received and sent on this connection (libnats' statistics).
  struct traffic {
    uint64_t in_msgs = 0;
    uint64_t out_msgs = 0;
  };
  traffic stats() const;
  // The largest payload the server takes, as it said on connecting; 0
  // while not connected.
  size_t max_payload() const;
  // Whether the connection is up now (not reconnecting, not closed).
  bool connected() const;

  uint64_t reconnects() const { return reconnects_.load(); }
  uint64_t slow_consumers() const { return slow_consumers_.load(); }
  uint64_t errors() const { return errors_.load(); }
  // Publishes and subscriptions nats-server refused this connection's
  // credential (Permissions Violation): counted, logged with the subject.
  uint64_t permission_denials() const { return denials_.load(); }
  uint64_t refused_replies() const { return refused_replies_.load(); }

 private:
  struct subscription {
    nats_handler handler;
    __natsSubscription* sub = nullptr;
  };

  // A request awaiting its reply on the bus's response inbox, or a
  // permission violation naming its subject or inbox.
  struct pending_request;

  nats_bus() = default;
  error fail(const std::string& what, int nats_status);
  // The wildcard subscription on this bus's response inbox, made on the
  // first request.
  status open_responses();
  void on_response(const std::string& subject, bool no_responders,
                   std::vector<uint8_t> payload);
  // Fails the requests a violation names; whether there was one.
  bool on_denied(const std::string& text);

  friend struct nats_callbacks;  // libnats' C callbacks, in nats.cpp

  nats_options opt_;
  __natsConnection* conn_ = nullptr;
  std::mutex mu_;  // guards subs_ and next_
  // Shared with libnats: its message callbacks hold a reference of their
  // own until the subscription's completion callback, since a callback may
  // still run after an unsubscribe returns.
  std::map<uint64_t, std::shared_ptr<subscription>> subs_;
  uint64_t next_ = 1;
  std::atomic<uint64_t> reconnects_{0};
  std::atomic<uint64_t> slow_consumers_{0};
  std::atomic<uint64_t> errors_{0};
  std::atomic<uint64_t> denials_{0};
  std::atomic<uint64_t> refused_replies_{0};
  std::string shown_url_;  // opt_.url without passwords
  // Requests in flight, by the last token of their reply subject.
  std::mutex req_mu_;  // guards the request fields below
  __natsSubscription* responses_ = nullptr;
  std::string response_prefix_;  // "_INBOX.<nuid>."
  std::map<uint64_t, std::shared_ptr<pending_request>> requests_;
  uint64_t next_request_ = 1;
  // The subjects confirm() was asked about, and the violation that named
  // each ("" while none did). Guarded by req_mu_.
  std::map<std::string, std::string> confirmed_;
  std::atomic<bool> closing_{false};  // our own close: no "lost" to log
  std::atomic<bool> closed_{false};   // libnats' last callback has run
};

}  // namespace kvmesh
