// A device's memory over time (docs/simulator.md, "Memory"): a step function that starts at the
// static bytes, changes only where events happen, and counts all events at one time together, so
// a backward that frees at the instant the next forward allocates makes no peak.
#include <algorithm>

#include "simulator_detail.h"

namespace flexpipe::sim {

void summarize_memory(std::span<const MemoryEvent> ordered, std::vector<MemoryEvent>& unordered, bool record_curve,
                      DeviceReport& report) {
  std::sort(unordered.begin(), unordered.end(),
            [](const MemoryEvent& a, const MemoryEvent& b) { return a.time < b.time; });
  double level = report.static_memory;
  report.peak_memory = level;
  report.peak_time = 0;
  report.memory.clear();
  if (record_curve) report.memory.push_back({0, level});

  size_t i = 0, j = 0;
  while (i < ordered.size() || j < unordered.size()) {
    const double time = j == unordered.size() || (i < ordered.size() && ordered[i].time <= unordered[j].time)
                            ? ordered[i].time
                            : unordered[j].time;
    for (; i < ordered.size() && ordered[i].time == time; ++i) level += ordered[i].delta;
    for (; j < unordered.size() && unordered[j].time == time; ++j) level += unordered[j].delta;
    if (level > report.peak_memory) {
      report.peak_memory = level;
      report.peak_time = time;
    }
    if (!record_curve) continue;
    if (report.memory.back().time == time) {
      report.memory.back().bytes = level;
    } else if (report.memory.back().bytes != level) {
      report.memory.push_back({time, level});
    }
  }
}

}  // namespace flexpipe::sim
