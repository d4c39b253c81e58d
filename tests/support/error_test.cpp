// Messages: locations, untrusted text quoted printably, and the count of errors not shown.
#include <string>

#include <gtest/gtest.h>

#include "flexpipe/support/error.h"

namespace flexpipe {
namespace {

TEST(Located, OmitsWhatIsZero) {
  EXPECT_EQ(located("a.csv", 3, 7, "bad"), "a.csv:3:7: bad");
  EXPECT_EQ(located("a.csv", 3, 0, "bad"), "a.csv:3: bad");
  EXPECT_EQ(located("a.csv", 0, 0, "bad"), "a.csv: bad");
}

TEST(Printable, KeepsTextAndTabsAndEscapesEveryOtherByte) {
  EXPECT_EQ(printable("1F0\tB3"), "1F0\tB3");
  EXPECT_EQ(printable(std::string("a\0b", 3)), "a\\x00b");
  EXPECT_EQ(printable("\x1b[31mred"), "\\x1B[31mred");
  EXPECT_EQ(printable("line\nnext\r"), "line\\x0Anext\\x0D");
  EXPECT_EQ(printable("\x7f"), "\\x7F");
}

TEST(Printable, KeepsWellFormedUtf8AndEscapesTheRest) {
  EXPECT_EQ(printable("r\xC3\xA9sum\xC3\xA9 \xE2\x86\x92 \xF0\x9F\x98\x80"),
            "r\xC3\xA9sum\xC3\xA9 \xE2\x86\x92 \xF0\x9F\x98\x80");
  EXPECT_EQ(printable("\xC3"), "\\xC3");                             // truncated sequence
  EXPECT_EQ(printable("\xC0\xAF"), "\\xC0\\xAF");                    // overlong '/'
  EXPECT_EQ(printable("\xED\xA0\x80"), "\\xED\\xA0\\x80");           // a surrogate
  EXPECT_EQ(printable("\xF4\x90\x80\x80"), "\\xF4\\x90\\x80\\x80");  // above U+10FFFF
  EXPECT_EQ(printable("\xEF\xBB\xBF"), "\xEF\xBB\xBF");
}

TEST(Printable, CutsAtTheLimitInCharacters) {
  EXPECT_EQ(printable("abcdef", 3), "abc...");
  EXPECT_EQ(printable("abc", 3), "abc");
  EXPECT_EQ(printable("\xC3\xA9\xC3\xA9\xC3\xA9", 2), "\xC3\xA9\xC3\xA9...");
  EXPECT_EQ(printable(std::string(1000, '\0')).size(), 60 * 4 + 3);
}

TEST(MoreErrors, CountsWhatIsNotShown) {
  EXPECT_EQ(more_errors(1), "... and 1 more error not shown");
  EXPECT_EQ(more_errors(149), "... and 149 more errors not shown");
}

}  // namespace
}  // namespace flexpipe
