// The numeric flags' validators (cli/number_flags.hpp).
#include "cli/number_flags.hpp"

#include <cmath>
#include <exception>
#include <string>

namespace kvmesh::cli {

namespace {

// A validator of numbers that `good` accepts, `want` in its message.
CLI::Validator number_check(const char* want, const char* desc,
                            bool (*good)(double)) {
  return CLI::Validator(
      [want, good](std::string& text) -> std::string {
        size_t used = 0;
        double v = 0;
        try {
          v = std::stod(text, &used);
        } catch (const std::exception&) {
          used = 0;
        }
        if (used == 0 || used != text.size() || !std::isfinite(v) || !good(v))
          return std::string("must be ") + want + ", got '" + text + "'";
        return {};
      },
      desc);
}

}  // namespace

const CLI::Validator positive = number_check("a positive number", "POSITIVE",
                                             [](double v) { return v > 0; });
const CLI::Validator non_negative = number_check(
    "a number >= 0", "NONNEGATIVE", [](double v) { return v >= 0; });
const CLI::Validator credit =
    number_check("a number from 0 to 1", "[0 - 1]",
                 [](double v) { return v >= 0 && v <= 1; });

}  // namespace kvmesh::cli
