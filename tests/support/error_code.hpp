// The ErrorCode a client call fails with (None when it succeeds): typed-error checks in tests.
#pragma once
#include <functional>

#include "nexus/error.hpp"

namespace nexus::test {

inline ErrorCode code_of(const std::function<void()>& call) {
  try {
    call();
  } catch (const Error& e) {
    return e.code();
  }
  return ErrorCode::None;
}

}  // namespace nexus::test
