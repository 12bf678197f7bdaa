// The mesh's public face in one include: the processes' roles (node agent,
// router, index shard), durable intake's names and the clients, each role
// in a header of its own.
#pragma once

#include "cluster/agent_node.hpp"
#include "cluster/clients.hpp"
#include "cluster/durable_intake.hpp"
#include "cluster/jetstream.hpp"
#include "cluster/meters.hpp"
#include "cluster/nats.hpp"
#include "cluster/router_node.hpp"
#include "cluster/shard_node.hpp"
#include "cluster/subjects.hpp"
