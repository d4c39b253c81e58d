// The per-stage memory bars: a bar over its budget turns red, labels and titles as given, `after`'s stages drawn.
#include <gtest/gtest.h>

#include <string>

#include "flexpipe/views/memory_bars.h"

namespace flexpipe {
namespace {

size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

TEST(MemoryBars, BarsOverTheirBudgetAreRed) {
  const MemoryBarPanel before{"before", {{10, 50, 3, "50 B"}, {10, 120, 4, "120 B"}}};
  const MemoryBarPanel after{"after", {{10, 60, 2, "60 B"}, {10, 90, 5, "90 B"}}};
  const std::string svg = render_memory_bars(before, after, {100, 100});
  EXPECT_EQ(svg.rfind("<svg", 0), 0u) << svg;
  EXPECT_EQ(count(svg, "fill=\"#e15759\""), 1u) << svg;  // before's second stage, 120 over 100
  EXPECT_EQ(count(svg, "fill=\"#4e79a7\""), 3u) << svg;
  EXPECT_EQ(count(svg, "fill=\"#9e9e9e\""), 4u) << svg;  // every stage's static memory
  EXPECT_EQ(count(svg, "stroke-dasharray"), 4u) << svg;  // every stage's budget
  for (const char* text : {">before<", ">after<", ">120 B<", ">90 B<", ">3 ops<", ">5 ops<", ">stage 1<"})
    EXPECT_NE(svg.find(text), std::string::npos) << text;
}

TEST(MemoryBars, DrawsTheStagesAfterHas) {
  const MemoryBarPanel before{"before", {{10, 50, 3, "50 B"}, {10, 60, 4, "60 B"}}};
  const MemoryBarPanel after{"after", {{10, 70, 7, "70 B"}}};
  const std::string svg = render_memory_bars(before, after, {100, 100});
  EXPECT_EQ(count(svg, "fill=\"#9e9e9e\""), 2u) << svg;
  EXPECT_NE(svg.find(">3 ops<"), std::string::npos) << svg;
  EXPECT_EQ(svg.find(">4 ops<"), std::string::npos) << svg;
  EXPECT_EQ(svg.find(">stage 1<"), std::string::npos) << svg;
}

}  // namespace
}  // namespace flexpipe
