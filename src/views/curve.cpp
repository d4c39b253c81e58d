// A loss curve as SVG: what `flexpipe train --curve` writes.
#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "flexpipe/support/error.h"
#include "flexpipe/views/views.h"

namespace flexpipe {

namespace {

// A tick spacing of 1, 2 or 5 times a power of ten giving about `count` ticks over `span`.
double tick_step(double span, int count) {
  const double raw = span / count;
  const double power = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0})
    if (raw <= m * power) return m * power;
  return 10 * power;
}

std::string escape(const std::string& text) {
  std::string out;
  for (char c : text) {
    if (c == '<')
      out += "&lt;";
    else if (c == '>')
      out += "&gt;";
    else if (c == '&')
      out += "&amp;";
    else
      out += c;
  }
  return out;
}

}  // namespace

std::string render_curve_svg(const std::string& title, const std::string& y_label, const std::vector<double>& values,
                             int first_step) {
  if (values.empty()) throw Error("render_curve_svg: no values to draw");
  constexpr double kWidth = 720, kHeight = 400, kLeft = 70, kRight = 20, kTop = 40, kBottom = 50;
  const double plot_w = kWidth - kLeft - kRight, plot_h = kHeight - kTop - kBottom;
  const auto [lo_it, hi_it] = std::minmax_element(values.begin(), values.end());
  double lo = *lo_it, hi = *hi_it;
  if (hi - lo < 1e-12) {
    lo -= 0.5;
    hi += 0.5;
  }
  const double y_step = tick_step(hi - lo, 5);
  lo = std::floor(lo / y_step) * y_step;
  hi = std::ceil(hi / y_step) * y_step;
  const double x_first = first_step + 1, x_last = first_step + double(values.size());
  const double x_span = std::max(1.0, x_last - x_first);
  auto x_of = [&](double step) { return kLeft + (step - x_first) / x_span * plot_w; };
  auto y_of = [&](double v) { return kTop + (hi - v) / (hi - lo) * plot_h; };
  std::string svg = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{0}\" height=\"{1}\" viewBox=\"0 0 {0} {1}\" "
      "font-family=\"sans-serif\" font-size=\"12\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
      "<text x=\"{2}\" y=\"22\" font-size=\"15\">{3}</text>\n",
      kWidth, kHeight, kLeft, escape(title));
  for (double v = lo; v <= hi + y_step / 2; v += y_step)
    svg += fmt::format(
        "<line x1=\"{0}\" x2=\"{1}\" y1=\"{2:.1f}\" y2=\"{2:.1f}\" stroke=\"#ddd\"/>"
        "<text x=\"{3}\" y=\"{4:.1f}\" text-anchor=\"end\">{5:g}</text>\n",
        kLeft, kWidth - kRight, y_of(v), kLeft - 6, y_of(v) + 4, std::round(v / y_step) * y_step);
  // Steps are whole: a run of a few steps gets a tick per step, never 1.2 or 1.5.
  const double x_step = std::max(1.0, tick_step(x_span, 8));
  for (double x = std::ceil(x_first / x_step) * x_step; x <= x_last; x += x_step)
    svg += fmt::format(
        "<line x1=\"{0:.1f}\" x2=\"{0:.1f}\" y1=\"{1}\" y2=\"{2}\" stroke=\"#ddd\"/>"
        "<text x=\"{0:.1f}\" y=\"{3}\" text-anchor=\"middle\">{4:g}</text>\n",
        x_of(x), kTop, kTop + plot_h, kTop + plot_h + 16, x);
  svg += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">step</text>\n", kLeft + plot_w / 2, kHeight - 10);
  svg += fmt::format("<text x=\"16\" y=\"{0}\" text-anchor=\"middle\" transform=\"rotate(-90 16 {0})\">{1}</text>\n",
                     kTop + plot_h / 2, escape(y_label));
  svg += "<polyline fill=\"none\" stroke=\"#1f77b4\" stroke-width=\"1.5\" points=\"";
  for (size_t i = 0; i < values.size(); ++i)
    svg += fmt::format("{}{:.1f},{:.1f}", i == 0 ? "" : " ", x_of(x_first + double(i)), y_of(values[i]));
  svg += "\"/>\n</svg>\n";
  return svg;
}

}  // namespace flexpipe
