// The JetStream pieces of durable intake in one include: the work queue of
// route requests, the writer that does not wait, and the record store.
#pragma once

#include "cluster/js_writer.hpp"
#include "cluster/record_store.hpp"
#include "cluster/work_queue.hpp"
