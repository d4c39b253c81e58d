// Messages: locations, untrusted text quoted printably, and the count of errors not shown.
#include <string>
#include <utility>

#include <gtest/gtest.h>

#include "flexpipe/support/error.h"

namespace flexpipe {
namespace {

TEST(Located, OmitsWhatIsZero) {
  EXPECT_EQ(located("a.csv", 3, 7, "bad"), "a.csv:3:7: bad");
  EXPECT_EQ(located("a.csv", 3, 0, "bad"), "a.csv:3: bad");
  EXPECT_EQ(located("a.csv", 0, 0, "bad"), "a.csv: bad");
}

// What printable() makes of each input: text and tabs kept, well-formed UTF-8 kept, every other byte
// escaped.
TEST(Printable, KeepsTextTabsAndWellFormedUtf8AndEscapesEveryOtherByte) {
  const std::pair<std::string, std::string> cases[] = {
      {"1F0\tB3", "1F0\tB3"},
      {std::string("a\0b", 3), "a\\x00b"},
      {"\x1b[31mred", "\\x1B[31mred"},
      {"line\nnext\r", "line\\x0Anext\\x0D"},
      {"\x7f", "\\x7F"},
      {"r\xC3\xA9sum\xC3\xA9 \xE2\x86\x92 \xF0\x9F\x98\x80", "r\xC3\xA9sum\xC3\xA9 \xE2\x86\x92 \xF0\x9F\x98\x80"},
      {"\xC3", "\\xC3"},                             // a truncated sequence
      {"\xC0\xAF", "\\xC0\\xAF"},                    // an overlong '/'
      {"\xED\xA0\x80", "\\xED\\xA0\\x80"},           // a surrogate
      {"\xF4\x90\x80\x80", "\\xF4\\x90\\x80\\x80"},  // above U+10FFFF
      {"\xEF\xBB\xBF", "\xEF\xBB\xBF"},              // a byte-order mark is a character
  };
  for (const auto& [input, shown] : cases) EXPECT_EQ(printable(input), shown) << shown;
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
