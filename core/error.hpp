// Errors as values for the pure core: one error enum and a minimal expected<T>.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <variant>

namespace kvmesh {

// The project's one error enum. The actor layer registers it as a CAF error
// category, so these codes travel unchanged from core to wire.
enum class ec : uint8_t {
  none = 0,
  invalid_argument,   // a value out of its domain (0 block size, 0 capacity)
  empty_input,        // nothing to work on (no tokens, empty trace)
  parse_error,        // malformed text (trace line, number, config)
  io_error,           // a file could not be opened or read
  not_found,          // an id that is not known
  capacity_exceeded,  // a bounded structure is full
  timeout,            // no answer in time (a peer on the network)
  conflict,           // another party is deciding the same thing right now
};

const char* to_string(ec code);

struct error {
  ec code = ec::none;
  std::string message;
};

inline error make_error(ec code, std::string message) {
  return error{code, std::move(message)};
}

// Holds a T or an error. Deliberately small: the core needs construction,
// a test and access; C++17 has no std::expected.
template <class T>
class expected {
 public:
  expected(T value) : v_(std::move(value)) {}
  expected(error err) : v_(std::move(err)) {}
  explicit operator bool() const { return v_.index() == 0; }
  T& operator*() { return std::get<0>(v_); }
  const T& operator*() const { return std::get<0>(v_); }
  T* operator->() { return &std::get<0>(v_); }
  const T* operator->() const { return &std::get<0>(v_); }
  const error& err() const { return std::get<1>(v_); }

 private:
  std::variant<T, error> v_;
};

// expected<void>: success or an error.
struct ok_t {};
inline constexpr ok_t ok{};
using status = expected<ok_t>;

}  // namespace kvmesh
