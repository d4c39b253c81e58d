// What every reader's fuzz target checks: an input is either read or refused with flexpipe::Error
// (anything else escaping is a bug, and so are crashes, hangs, leaks and large allocations, which
// libFuzzer and the sanitizers catch), and what is read survives its writer unchanged.
#pragma once
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "flexpipe/support/error.h"

namespace flexpipe::fuzz {

inline std::string input_text(const uint8_t* data, size_t size) { return {reinterpret_cast<const char*>(data), size}; }

// Runs `read`; true when it returned, false when it refused the input with Error.
template <typename Read>
bool reads(Read&& read) {
  try {
    read();
    return true;
  } catch (const Error&) {
    return false;
  }
}

// Reads the input with `parse`; what it reads must read back equal from `write`'s text.
template <typename Parse, typename Write>
void check_round_trip(const char* reader, const uint8_t* data, size_t size, Parse&& parse, Write&& write) {
  decltype(parse(std::string(), std::string())) value;
  if (!reads([&] { value = parse(input_text(data, size), "fuzz"); })) return;
  const std::string written = write(value);
  if (parse(written, "written") == value) return;
  std::fprintf(stderr, "%s: what was read does not read back the same from its writer's text:\n%s\n", reader,
               written.c_str());
  std::abort();
}

}  // namespace flexpipe::fuzz
