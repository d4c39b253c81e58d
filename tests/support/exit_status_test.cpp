// Tests of the exit codes scripts rely on.
#include "flexpipe/support/exit_status.h"

#include <stdexcept>

#include <gtest/gtest.h>

#include "flexpipe/support/error.h"

namespace flexpipe {
namespace {

TEST(ExitStatus, TheCodesScriptsRelyOn) {
  EXPECT_EQ(kExitSuccess, 0);
  EXPECT_EQ(kExitProblemsFound, 1);
  EXPECT_EQ(kExitBadInput, 2);
  EXPECT_EQ(kExitFailure, 3);
}

TEST(ExitStatus, AnErrorIsBadInput) {
  testing::internal::CaptureStderr();
  EXPECT_EQ(report_exception(Error("s.json: missing field 'devices'")), kExitBadInput);
  EXPECT_EQ(testing::internal::GetCapturedStderr(), "error: s.json: missing field 'devices'\n");
}

TEST(ExitStatus, AnyOtherExceptionIsAnInternalError) {
  testing::internal::CaptureStderr();
  EXPECT_EQ(report_exception(std::out_of_range("vector"), "rank 1: "), kExitFailure);
  EXPECT_EQ(testing::internal::GetCapturedStderr(), "internal error: rank 1: vector\n");
}

TEST(ExitStatus, AFailureTheCallerClassified) {
  testing::internal::CaptureStderr();
  EXPECT_EQ(report_error(kExitFailure, "rank 0: peer 1 went away"), kExitFailure);
  EXPECT_EQ(testing::internal::GetCapturedStderr(), "error: rank 0: peer 1 went away\n");
}

TEST(ExitStatus, ACompilerStyleMessageKeepsItsOwnPrefixOnly) {
  testing::internal::CaptureStderr();
  EXPECT_EQ(report_exception(Error("p.fps:5:26: error: expected ')'\n    5 | F(d x)\n      |     ^"), "rank 1: "),
            kExitBadInput);
  EXPECT_EQ(testing::internal::GetCapturedStderr(),
            "rank 1: p.fps:5:26: error: expected ')'\n    5 | F(d x)\n      |     ^\n");
  // Only the first line counts: a list of findings below a message of its own keeps the prefix.
  testing::internal::CaptureStderr();
  report_error(kExitBadInput, "p.fps: invalid schedule (1 error)\n  p.fps: error: device 0: missing 0F1");
  EXPECT_EQ(testing::internal::GetCapturedStderr(),
            "error: p.fps: invalid schedule (1 error)\n  p.fps: error: device 0: missing 0F1\n");
}

// The last guard: a message that quotes bytes nobody escaped still reaches the terminal as text, line
// by line, its line breaks kept.
TEST(ExitStatus, BytesThatAreNotTextAreShownEscaped) {
  testing::internal::CaptureStderr();
  EXPECT_EQ(report_exception(Error("unknown '\xFF\x1B[2J'\n  at 'caf\xC3\xA9'")), kExitBadInput);
  EXPECT_EQ(testing::internal::GetCapturedStderr(), "error: unknown '\\xFF\\x1B[2J'\n  at 'caf\xC3\xA9'\n");
  testing::internal::CaptureStderr();
  EXPECT_EQ(report_exception(std::runtime_error("bad \xC0 byte")), kExitFailure);
  EXPECT_EQ(testing::internal::GetCapturedStderr(), "internal error: bad \\xC0 byte\n");
}

}  // namespace
}  // namespace flexpipe
