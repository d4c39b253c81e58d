// libFuzzer target for Megatron's pipeline layout strings.
#include "flexpipe/interop/megatron_layout.h"
#include "fuzz_target.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  flexpipe::fuzz::reads([&] { flexpipe::parse_megatron_layout(flexpipe::fuzz::input_text(data, size)); });
  return 0;
}
