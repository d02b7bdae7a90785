#pragma once
// The message of the fathom::Error an action throws, for tests that check what a rejected input is told.
#include <functional>
#include <string>

#include "core/error.h"

namespace fathom::testing {

// error.what() of the fathom::Error that `action` throws; "" when it throws none (other exceptions propagate).
inline std::string error_of(const std::function<void()>& action) {
  try {
    action();
  } catch (const Error& error) {
    return error.what();
  }
  return "";
}

}  // namespace fathom::testing
