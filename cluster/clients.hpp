// The mesh's clients, blocking (for command-line tools, not inside actors):
// one route request, one admin call, and a remote ROUTER as a local actor.
#pragma once

#include <caf/all.hpp>

#include <chrono>
#include <string>

#include "actors/actors.hpp"
#include "cluster/nats.hpp"
#include "cluster/subjects.hpp"
#include "core/error.hpp"
#include "messages/types.hpp"

namespace kvmesh {

// Routes one request and waits for the decision (an error names why there
// is none: no reply in time, or the router's reason).
expected<decision> route_once(nats_bus& bus, const subjects& subj,
                              const route_request_msg& r,
                              std::chrono::milliseconds timeout);

// Like route_once, through the JetStream work queue: stored before any
// router sees it, so a router that dies mid-auction loses nothing (another
// one gets it after the ack wait). The stream is created when missing. The
// answer travels on core NATS, lost if it comes while this client is
// reconnecting: after a reconnect, and at the timeout, the answer is read
// from the request's decision record instead.
expected<decision> route_durable_once(nats_bus& bus, const subjects& subj,
                                      const route_request_msg& r,
                                      std::chrono::milliseconds timeout);

// Sends `verb` (see subjects::admin) to the mesh's ADMIN and waits. The
// workers listing comes in pages (AdminReply.more); this asks for each in
// turn and returns them as one, `timeout` per page.
expected<admin_reply> admin_request_call(nats_bus& bus, const subjects& subj,
                                         const std::string& verb,
                                         const admin_request& req,
                                         std::chrono::milliseconds timeout);

// A ROUTER in another process as an actor of this one: route requests go
// over NATS (queue group "routers"), so a replay client can drive the mesh.
// Request events (first tokens, ends) published by agents go to
// `listener` when set.
expected<router_actor> spawn_remote_router(caf::actor_system& sys,
                                           nats_bus& bus,
                                           const mesh_options& opt,
                                           listener_actor listener);

}  // namespace kvmesh
