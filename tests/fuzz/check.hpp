// The fuzz targets' invariant check: a violated invariant aborts, which
// libFuzzer reports as a crash and saves the input that caused it.
#pragma once

#include <cstdio>
#include <cstdlib>

#define FUZZ_CHECK(cond, what)                                            \
  do {                                                                    \
    if (!(cond)) {                                                        \
      std::fprintf(stderr, "%s:%d: invariant failed: %s: %s\n", __FILE__, \
                   __LINE__, #cond, what);                                \
      std::abort();                                                       \
    }                                                                     \
  } while (false)
