// Per-stage memory as stacked bars against each stage's budget: two partitions side by side, as SVG.
#pragma once
#include <string>
#include <vector>

namespace flexpipe {

// One stage's bar: its static memory (parameters, gradients, optimizer state) under the rest.
struct StageMemoryBar {
  double static_memory = 0;
  double memory = 0;  // the whole stage: static memory, activations and workspace
  int operators = 0;
  std::string label;  // written above the bar: the total, in the caller's units
};

struct MemoryBarPanel {
  std::string title;
  std::vector<StageMemoryBar> stages;
};

// `before` on the left, `after` on the right, each stage against its budget (a dashed line; a bar over it
// is red), on one scale. Draws as many stages as `after` has; `budget` holds one per stage at least.
std::string render_memory_bars(const MemoryBarPanel& before, const MemoryBarPanel& after,
                               const std::vector<double>& budget);

}  // namespace flexpipe
