// The checksum: FNV-1a from the offset checkpoints have always used (values computed apart, in Python:
// h = 1469598103934665603; for each byte h = ((h ^ byte) * 1099511628211) mod 2^64).
#include "flexpipe/support/checksum.h"

#include <gtest/gtest.h>

namespace flexpipe {
namespace {

TEST(Checksum, IsFnv1aFromTheCheckpointsOffsetAsSixteenHexDigits) {
  EXPECT_EQ(checksum(""), "14650fb0739d0383");
  EXPECT_EQ(checksum("a"), "44bd8ad473cd9906");
  EXPECT_EQ(checksum("foobar"), "88fad7c0a8ff07f2");
  EXPECT_NE(checksum(std::string_view("plan\0a", 6)), checksum(std::string_view("plan\0b", 6)));
}

}  // namespace
}  // namespace flexpipe
