// Accelerator profiles that turn operator FLOPs and bytes into times, and their links into the cost
// table's bandwidths. Figures and their sources: docs/hardware.md. All rates are per second here;
// the cost graph and cost table work in milliseconds.
#pragma once
#include <span>
#include <string>

#include "flexpipe/costs/cost_graph.h"

namespace flexpipe {

struct HardwareProfile {
  std::string name;
  double peak_flops = 0;            // dense bf16 tensor-core FLOP/s (no sparsity)
  double hbm_bandwidth = 0;         // bytes/s
  double memory_bytes = 0;          // HBM capacity
  double efficiency = 0;            // achievable fraction of peak FLOP/s and of HBM bandwidth
  double nvlink_bandwidth = 0;      // bytes/s per direction, one GPU to the NVLink fabric
  double infiniband_bandwidth = 0;  // bytes/s per direction, one NIC per GPU
  double pcie_bandwidth = 0;        // bytes/s per direction, GPU to host (x16)
  std::string source;               // where the figures come from
};

std::span<const HardwareProfile> hardware_profiles();
// By name, case-insensitively; throws Error listing the known names.
const HardwareProfile& find_hardware(const std::string& name);

// The rates a cost graph times its operators with: peak * efficiency, per millisecond.
RooflineRates roofline_rates(const HardwareProfile& hardware);

enum class Interconnect { NvLink, InfiniBand, Pcie };
// Bytes per millisecond between two devices over that interconnect.
double link_bandwidth_per_ms(const HardwareProfile& hardware, Interconnect interconnect);

}  // namespace flexpipe
