// The message of the flexpipe::Error an action throws, for tests that pin messages exactly.
#pragma once
#include <string>

#include "flexpipe/support/error.h"

namespace flexpipe::test {

inline std::string error_text(auto&& action) {
  try {
    action();
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

}  // namespace flexpipe::test
