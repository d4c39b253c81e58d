// A measured cost graph set against a hardware profile's roofline times, pass by pass (flexpipe profile --check).
#include "flexpipe/costs/hardware_check.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "flexpipe/support/error.h"
#include "flexpipe/support/quantity.h"

namespace flexpipe {

HardwareCheck check_against_hardware(const CostGraph& measured, const HardwareProfile& hardware, double tolerance) {
  const std::optional<double> seconds = seconds_per_time_unit(measured.time_unit);
  if (!seconds)
    throw Error(fmt::format("{}: its times are in '{}', not a unit of time: there is no measurement to compare with {}",
                            measured.name, measured.time_unit, hardware.name));
  HardwareCheck check;
  check.hardware = hardware.name;
  check.efficiency = hardware.efficiency;
  check.tolerance = tolerance;
  // Per time unit of the graph: the device's peak rates, not yet scaled by the profile's efficiency.
  const double flop_rate = hardware.peak_flops * *seconds, byte_rate = hardware.hbm_bandwidth * *seconds;
  double compute_ideal = 0, compute_measured = 0, memory_ideal = 0, memory_measured = 0;
  for (const OperatorNode& node : measured.nodes) {
    for (const Pass pass : {Pass::Forward, Pass::BackwardInput, Pass::BackwardWeight}) {
      const PassCost& cost = pass_cost(node, pass);
      const double flops = cost.flops.at(measured.reference.microbatch_size, measured.reference.seq_len);
      const double bytes = cost.bytes.at(measured.reference.microbatch_size, measured.reference.seq_len);
      if (cost.time <= 0 || (flops <= 0 && bytes <= 0)) continue;
      PassComparison comparison;
      comparison.node = node.name;
      comparison.pass = pass;
      comparison.measured = cost.time;
      comparison.compute_bound = flops / flop_rate >= bytes / byte_rate;
      const double ideal = std::max(flops / flop_rate, bytes / byte_rate);
      comparison.predicted = ideal / hardware.efficiency;
      comparison.achieved = ideal / cost.time;
      (comparison.compute_bound ? compute_ideal : memory_ideal) += ideal;
      (comparison.compute_bound ? compute_measured : memory_measured) += cost.time;
      comparison.off = std::abs(comparison.predicted - comparison.measured) > tolerance * comparison.measured;
      if (comparison.off) ++check.off;
      check.passes.push_back(std::move(comparison));
    }
  }
  if (check.passes.empty())
    throw Error(fmt::format("{}: no operator pass has both a measured time and FLOPs or bytes to predict it from",
                            measured.name));
  check.compute_efficiency = compute_measured > 0 ? compute_ideal / compute_measured : 0;
  check.memory_efficiency = memory_measured > 0 ? memory_ideal / memory_measured : 0;
  return check;
}

}  // namespace flexpipe
