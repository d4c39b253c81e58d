// The simulation report: JSON for tools, an aligned table for people.
#include <algorithm>
#include <array>
#include <cmath>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "flexpipe/views/views.h"
#include "view_common.h"

namespace flexpipe {

namespace {

using nlohmann::json;

// JSON has no infinity or NaN: an unlimited capacity, or a ratio of an empty run, is null.
json number(double value) { return std::isfinite(value) ? json(value) : json(nullptr); }

std::string percent(double ratio) { return std::isfinite(ratio) ? fmt::format("{:.1f}%", 100 * ratio) : "-"; }

}  // namespace

json report_json(const Schedule& schedule, const CostTable& costs, const SimResult& result) {
  views::require_device_reports(schedule, result, "report");
  json devices = json::array();
  for (int d = 0; d < schedule.num_devices; ++d) {
    const DeviceReport& device = result.devices[d];
    devices.push_back({{"device", d},
                       {"busy", number(device.busy)},
                       {"idle", number(device.idle)},
                       {"peak_memory", number(device.peak_memory)},
                       {"peak_time", number(device.peak_time)},
                       {"static_memory", number(device.static_memory)},
                       {"capacity", number(device.capacity)},
                       {"fits", device.fits}});
  }
  return {{"schedule", schedule.name},
          {"devices_count", schedule.num_devices},
          {"microbatches", schedule.num_microbatches},
          {"stages", schedule.num_stages()},
          {"makespan", number(result.makespan)},
          {"bubble_ratio", number(result.bubble_ratio)},
          {"lower_bound", number(result.lower_bound)},
          {"efficiency", number(result.efficiency)},
          {"comm_bytes", number(result.comm_bytes)},
          {"comm_transfers", result.comm_transfers},
          {"fits", result.fits},
          {"time_unit", costs.time_unit},
          {"memory_unit", costs.memory_unit},
          {"devices", std::move(devices)}};
}

std::string render_report(const Schedule& schedule, const CostTable& costs, const SimResult& result, ByteUnits bytes) {
  views::require_device_reports(schedule, result, "report");
  const bool in_bytes = costs.memory_unit == "bytes" || costs.memory_unit == "B";
  const bool timed = costs.time_unit != "unit";
  const auto time = [&](double t) { return timed ? format_time(t, costs.time_unit) : views::format_number(t); };
  const auto size = [&](double b) { return in_bytes ? format_bytes(b, bytes) : views::format_number(b); };
  std::string out = fmt::format("schedule {}: {} devices, {} micro-batches, {} stages (time in {}, memory in {})\n",
                                schedule.name, schedule.num_devices, schedule.num_microbatches, schedule.num_stages(),
                                costs.time_unit, costs.memory_unit);
  out += fmt::format("makespan {}, bubble {}, lower bound {}, efficiency {}\n", time(result.makespan),
                     percent(result.bubble_ratio), time(result.lower_bound), percent(result.efficiency));
  std::string memory = "fits";
  if (!result.fits) {
    memory = "does not fit on device";
    std::string over;
    for (int d = 0; d < schedule.num_devices; ++d)
      if (!result.devices[d].fits) over += fmt::format("{}{}", over.empty() ? "" : ", ", d);
    memory += (over.find(',') == std::string::npos ? " " : "s ") + over;
  }
  out += fmt::format("communication {} transfers, volume {}; memory {}\n", result.comm_transfers,
                     size(result.comm_bytes), memory);

  constexpr size_t kColumns = 8;
  using Row = std::array<std::string, kColumns>;
  std::vector<Row> rows;
  rows.push_back({"device", "busy", "idle", "peak memory", "peak time", "static memory", "capacity", "fits"});
  for (int d = 0; d < schedule.num_devices; ++d) {
    const DeviceReport& device = result.devices[d];
    rows.push_back({fmt::format("d{}", d), time(device.busy), time(device.idle), size(device.peak_memory),
                    time(device.peak_time), size(device.static_memory),
                    std::isfinite(device.capacity) ? size(device.capacity) : "-", device.fits ? "yes" : "no"});
  }
  std::array<size_t, kColumns> width{};
  for (const Row& row : rows)
    for (size_t c = 0; c < kColumns; ++c) width[c] = std::max(width[c], row[c].size());
  for (const Row& row : rows) {
    std::string line = fmt::format("{:<{}}", row[0], width[0]);
    for (size_t c = 1; c < kColumns; ++c) line += fmt::format("  {:>{}}", row[c], width[c]);
    out += line + "\n";
  }
  return out;
}

}  // namespace flexpipe
