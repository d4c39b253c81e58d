// The loss-curve chart: points where the axes put them, round ticks, escaped text.
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

TEST(CurveView, AFlatCurveStillHasAnAxisAndNothingIsAnError) {
  EXPECT_NE(render_curve_svg("t", "loss", {2, 2, 2}).find("<polyline"), std::string::npos);
  EXPECT_THROW(render_curve_svg("t", "loss", {}), Error);
}

}  // namespace
}  // namespace flexpipe
