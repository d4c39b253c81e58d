// Per-stage memory bars, before and after a partition plan, as SVG.
#include "flexpipe/views/memory_bars.h"

#include <algorithm>

#include <fmt/format.h>

namespace flexpipe {

std::string render_memory_bars(const MemoryBarPanel& before, const MemoryBarPanel& after,
                               const std::vector<double>& budget) {
  const int stages = static_cast<int>(after.stages.size());
  double top = 0;
  for (const MemoryBarPanel* panel : {&before, &after})
    for (const StageMemoryBar& stage : panel->stages) top = std::max(top, stage.memory);
  for (double b : budget) top = std::max(top, b);
  top *= 1.1;
  const double panel = 400, height = 330, base = 260, left = 50, bar = std::min(48.0, 280.0 / stages);
  auto y = [&](double bytes) { return base - bytes / top * 220; };
  std::string svg = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{}\" font-family=\"sans-serif\" "
      "font-size=\"11\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n",
      left + 2 * panel, height);
  const MemoryBarPanel* panels[2] = {&before, &after};
  for (int side = 0; side < 2; ++side) {
    const double x0 = left + side * panel;
    svg += fmt::format("<text x=\"{}\" y=\"18\" font-size=\"13\">{}</text>\n", x0, panels[side]->title);
    svg += fmt::format("<line x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"black\"/>\n", x0, base, x0 + panel - 30,
                       base);
    for (int s = 0; s < stages && s < static_cast<int>(panels[side]->stages.size()); ++s) {
      const StageMemoryBar& stage = panels[side]->stages[s];
      const double x = x0 + 10 + s * (panel - 40) / stages;
      const double fixed = stage.static_memory, total = stage.memory;
      svg += fmt::format("<rect x=\"{:.1f}\" y=\"{:.1f}\" width=\"{:.1f}\" height=\"{:.1f}\" fill=\"#9e9e9e\"/>\n", x,
                         y(fixed), bar, base - y(fixed));
      svg += fmt::format("<rect x=\"{:.1f}\" y=\"{:.1f}\" width=\"{:.1f}\" height=\"{:.1f}\" fill=\"{}\"/>\n", x,
                         y(total), bar, y(fixed) - y(total), total > budget[s] ? "#e15759" : "#4e79a7");
      svg += fmt::format(
          "<line x1=\"{:.1f}\" y1=\"{:.1f}\" x2=\"{:.1f}\" y2=\"{:.1f}\" stroke=\"black\" "
          "stroke-dasharray=\"4 3\"/>\n",
          x - 4, y(budget[s]), x + bar + 4, y(budget[s]));
      svg += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"middle\">{}</text>\n", x + bar / 2,
                         y(total) - 4, stage.label);
      svg += fmt::format("<text x=\"{:.1f}\" y=\"{}\" text-anchor=\"middle\">stage {}</text>\n", x + bar / 2, base + 14,
                         s);
      svg += fmt::format("<text x=\"{:.1f}\" y=\"{}\" text-anchor=\"middle\">{} ops</text>\n", x + bar / 2, base + 27,
                         stage.operators);
    }
  }
  svg += fmt::format(
      "<text x=\"{}\" y=\"{}\">grey: parameters, gradients, optimizer state; blue: activations and workspace "
      "(red: over the limit)</text>\n<text x=\"{}\" y=\"{}\">dashed: the stage's share of the device's memory "
      "limit</text>\n</svg>\n",
      left, height - 22, left, height - 8);
  return svg;
}

}  // namespace flexpipe
