// The loss-curve chart: points where the axes put them, round ticks, escaped text.
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "flexpipe/support/error.h"
#include "flexpipe/views/views.h"

namespace flexpipe {
namespace {

TEST(CurveView, PointsSitOnTheirTicks) {
  // 720 x 400 canvas, plot from x = 70 to 700 and y = 40 to 350; values 2..4 give ticks 2, 2.5, ..., 4.
  const std::string svg = render_curve_svg("a < b", "loss", {4, 3, 2});
  EXPECT_NE(svg.find("<text x=\"70\" y=\"22\" font-size=\"15\">a &lt; b</text>"), std::string::npos) << svg;
  EXPECT_NE(svg.find("points=\"70.0,40.0 385.0,195.0 700.0,350.0\""), std::string::npos) << svg;
  for (const char* tick : {">2<", ">2.5<", ">3<", ">3.5<", ">4<"}) EXPECT_NE(svg.find(tick), std::string::npos) << tick;
}

TEST(CurveView, StepsCountFromTheFirstStepPlusOne) {
  const std::string svg = render_curve_svg("t", "loss", {1, 2}, 10);  // steps 11 and 12
  EXPECT_NE(svg.find(">11<"), std::string::npos) << svg;
  EXPECT_NE(svg.find(">12<"), std::string::npos) << svg;
}

// The step axis' labels: the texts under the plot (y = 350 + 16).
std::vector<std::string> step_ticks(const std::string& svg) {
  std::vector<std::string> ticks;
  const std::string marker = "y=\"366\" text-anchor=\"middle\">";
  for (size_t at = svg.find(marker); at != std::string::npos; at = svg.find(marker, at + 1)) {
    const size_t begin = at + marker.size();
    ticks.push_back(svg.substr(begin, svg.find('<', begin) - begin));
  }
  return ticks;
}

TEST(CurveView, StepTicksAreWholeSteps) {
  EXPECT_EQ(step_ticks(render_curve_svg("t", "loss", {3, 2})), (std::vector<std::string>{"1", "2"}));
  EXPECT_EQ(step_ticks(render_curve_svg("t", "loss", {3, 2, 1})), (std::vector<std::string>{"1", "2", "3"}));
  EXPECT_EQ(step_ticks(render_curve_svg("t", "loss", {3})), (std::vector<std::string>{"1"}));
  for (const std::string& tick : step_ticks(render_curve_svg("t", "loss", std::vector<double>(7, 1.0))))
    EXPECT_EQ(tick.find('.'), std::string::npos) << tick;
}

TEST(CurveView, AFlatCurveStillHasAnAxisAndNothingIsAnError) {
  EXPECT_NE(render_curve_svg("t", "loss", {2, 2, 2}).find("<polyline"), std::string::npos);
  EXPECT_THROW(render_curve_svg("t", "loss", {}), Error);
}

}  // namespace
}  // namespace flexpipe
