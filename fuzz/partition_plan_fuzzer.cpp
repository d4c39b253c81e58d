// libFuzzer target for the partition plan reader: what it reads is written the same way again after a
// second read (plans hold free-form reports, so their text is what is compared).
#include "flexpipe/interop/partition_plan_json.h"
#include "fuzz_target.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  flexpipe::fuzz::check_round_trip(
      "partition plan", data, size,
      [](const std::string& text, const std::string& origin) {
        return flexpipe::partition_plan_to_json(flexpipe::parse_partition_plan(text, origin));
      },
      [](const std::string& written) { return written; });
  return 0;
}
