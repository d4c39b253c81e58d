// The accelerator profiles. Every figure is the vendor's published one (docs/hardware.md gives the
// documents); only the efficiency factor is ours.
#include "flexpipe/costs/hardware.h"

#include <algorithm>
#include <cctype>

#include <fmt/format.h>

#include "flexpipe/support/error.h"

namespace flexpipe {

namespace {

constexpr double kGB = 1e9;
constexpr double kTera = 1e12;
// Megatron reaches about 52% of peak at scale (Narayanan et al., SC'21); one factor for compute and
// memory keeps the profile honest about what it does not know.
constexpr double kEfficiency = 0.5;

const HardwareProfile kProfiles[] = {
    {"A100-80GB", 312 * kTera, 2039 * kGB, 80 * kGB, kEfficiency, 300 * kGB, 25 * kGB, 32 * kGB,
     "NVIDIA A100 Tensor Core GPU datasheet (SXM4 80GB): 312 TFLOPS BF16 dense, 2,039 GB/s HBM2e, "
     "NVLink 600 GB/s, PCIe Gen4 64 GB/s; HDR InfiniBand 200 Gb/s per GPU (DGX A100)"},
    {"H100-80GB", 989 * kTera, 3350 * kGB, 80 * kGB, kEfficiency, 450 * kGB, 50 * kGB, 64 * kGB,
     "NVIDIA H100 Tensor Core GPU datasheet (SXM5): 1,979 TFLOPS BF16 with sparsity (989 dense), "
     "3.35 TB/s HBM3, NVLink 900 GB/s, PCIe Gen5 128 GB/s; NDR InfiniBand 400 Gb/s per GPU (DGX H100)"},
    {"H200-141GB", 989 * kTera, 4800 * kGB, 141 * kGB, kEfficiency, 450 * kGB, 50 * kGB, 64 * kGB,
     "NVIDIA H200 Tensor Core GPU datasheet (SXM): 1,979 TFLOPS BF16 with sparsity (989 dense), "
     "141 GB HBM3e at 4.8 TB/s, NVLink 900 GB/s, PCIe Gen5 128 GB/s; NDR InfiniBand 400 Gb/s per GPU (DGX H200)"},
};

std::string lowercase(std::string text) {
  std::transform(text.begin(), text.end(), text.begin(), [](unsigned char c) { return std::tolower(c); });
  return text;
}

}  // namespace

std::span<const HardwareProfile> hardware_profiles() { return kProfiles; }

const HardwareProfile& find_hardware(const std::string& name) {
  const std::string wanted = lowercase(name);
  for (const HardwareProfile& profile : kProfiles)
    if (lowercase(profile.name) == wanted) return profile;
  std::string known;
  for (const HardwareProfile& profile : kProfiles)
    known += fmt::format("{}{}", known.empty() ? "" : ", ", profile.name);
  throw Error(fmt::format("unknown hardware '{}' (known: {})", name, known));
}

RooflineRates roofline_rates(const HardwareProfile& hardware) {
  return {hardware.name, hardware.peak_flops * hardware.efficiency / 1000,
          hardware.hbm_bandwidth * hardware.efficiency / 1000};
}

double link_bandwidth_per_ms(const HardwareProfile& hardware, Interconnect interconnect) {
  switch (interconnect) {
    case Interconnect::NvLink: return hardware.nvlink_bandwidth / 1000;
    case Interconnect::InfiniBand: return hardware.infiniband_bandwidth / 1000;
    case Interconnect::Pcie: return hardware.pcie_bandwidth / 1000;
  }
  return hardware.nvlink_bandwidth / 1000;
}

}  // namespace flexpipe
