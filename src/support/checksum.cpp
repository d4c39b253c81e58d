// The 64-bit FNV-1a-style checksum, as 16 hex digits.
#include "flexpipe/support/checksum.h"

#include <cstdint>

#include <fmt/format.h>

namespace flexpipe {

std::string checksum(std::string_view data) {
  uint64_t hash = 1469598103934665603ULL;
  for (const char c : data) {
    hash ^= static_cast<unsigned char>(c);
    hash *= 1099511628211ULL;
  }
  return fmt::format("{:016x}", hash);
}

}  // namespace flexpipe
