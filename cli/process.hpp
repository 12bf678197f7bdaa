// The harness's signal helpers and thread limit under the names the mesh
// commands (cmd_mesh.cpp) use, so that they need no change of their own.
#pragma once

#include "harness/launcher.hpp"
#include "harness/process.hpp"

namespace kvmesh::cli {

using harness::block_signals;
using harness::max_threads;
using harness::wait_for_stop;

}  // namespace kvmesh::cli
