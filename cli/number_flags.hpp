// Validators of numeric flags whose messages say what is wanted, as people
// write it (CLI11's own print the range of a double, 309 digits).
#pragma once

#include <CLI/CLI.hpp>

namespace kvmesh::cli {

// CLI11 prefixes the flag's name: "--workers: must be a positive number,
// got 'abc'".
extern const CLI::Validator positive;
extern const CLI::Validator non_negative;
extern const CLI::Validator credit;  // from 0 to 1

}  // namespace kvmesh::cli
