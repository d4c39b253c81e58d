// A cost graph whose times were measured on a device (`flexpipe profile`) set against what a hardware
// profile predicts for the same operators: pass by pass, the measured time, the roofline time at the
// profile's efficiency, and the fraction of the device's peak the pass reached; in sum, the
// efficiencies that would make the profile predict the measured compute-bound and memory-bound
// passes (`flexpipe model compare`, docs/hardware.md).
#pragma once
#include <string>
#include <vector>

#include "flexpipe/costs/cost_graph.h"
#include "flexpipe/costs/hardware.h"

namespace flexpipe {

struct PassComparison {
  std::string node;
  Pass pass = Pass::Forward;
  double measured = 0;        // in the graph's time unit, at its reference shape
  double predicted = 0;       // max(flops / peak, bytes / bandwidth) / efficiency, same unit
  bool compute_bound = true;  // flops / peak >= bytes / bandwidth
  double achieved = 0;        // max(flops / peak, bytes / bandwidth) / measured: the efficiency that fits
  bool off = false;           // |predicted - measured| > tolerance * measured
};

struct HardwareCheck {
  std::string hardware;
  double efficiency = 0;  // the profile's
  double tolerance = 0;   // a pass is off when |predicted - measured| > tolerance * measured
  // Every pass with a measured time and FLOPs or bytes, in graph order.
  std::vector<PassComparison> passes;
  // Time-weighted over the compute-bound (memory-bound) passes: sum of flops / peak (bytes / bandwidth)
  // over sum of measured times; 0 where there is no such pass.
  double compute_efficiency = 0;
  double memory_efficiency = 0;
  int off = 0;  // passes off by more than the tolerance
};

// Throws Error when the graph's time unit is not a time (nothing to compare against) or no pass has
// both a measured time and FLOPs or bytes.
HardwareCheck check_against_hardware(const CostGraph& measured, const HardwareProfile& hardware,
                                     double tolerance = 0.2);

}  // namespace flexpipe
