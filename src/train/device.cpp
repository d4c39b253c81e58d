// --device (cpu, cuda, cuda:N) read and each rank's GPU chosen, torch-free.
#include "flexpipe/train/device.h"

#include <charconv>

#include <fmt/format.h>

#include "flexpipe/support/error.h"

namespace flexpipe::runtime {

Device parse_device(std::string_view text) {
  if (text == "cpu") return {};
  if (text == "cuda") return {Device::Kind::Cuda, -1};
  if (text.starts_with("cuda:")) {
    const std::string_view digits = text.substr(5);
    int index = -1;
    const auto [end, error] = std::from_chars(digits.data(), digits.data() + digits.size(), index);
    if (!digits.empty() && error == std::errc() && end == digits.data() + digits.size() && index >= 0)
      return {Device::Kind::Cuda, index};
  }
  throw Error(
      fmt::format("--device '{}': expected cpu, cuda (each rank the GPU of its LOCAL_RANK) or cuda:N "
                  "(GPU N, a whole number)",
                  text));
}

Device rank_device(const Device& device, const RankEnv& env) {
  if (device.kind == Device::Kind::Cuda && device.index < 0) return {Device::Kind::Cuda, env.local_rank};
  return device;
}

std::string to_string(const Device& device) {
  if (device.kind == Device::Kind::Cpu) return "cpu";
  return device.index < 0 ? "cuda" : fmt::format("cuda:{}", device.index);
}

}  // namespace flexpipe::runtime
