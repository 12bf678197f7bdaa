// The harness's signal helpers under the names the mesh commands use.
// cmd_mesh.cpp includes this path and calls them unqualified.
#pragma once

#include "harness/launcher.hpp"
#include "harness/process.hpp"

namespace kvmesh::cli {

using harness::block_signals;
using harness::max_threads;
using harness::wait_for_stop;

}  // namespace kvmesh::cli
