// libFuzzer target for the partition plan reader; what it reads is written the same way twice.
#include "flexpipe/interop/partition_plan_json.h"
#include "fuzz_target.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace flexpipe;
  PartitionPlan plan;
  if (!fuzz::reads([&] { plan = parse_partition_plan(fuzz::input_text(data, size), "fuzz.plan.json"); })) return 0;
  const std::string written = partition_plan_to_json(plan);
  if (partition_plan_to_json(parse_partition_plan(written, "written.plan.json")) != written)
    fuzz::round_trip_failed("partition plan", written);
  return 0;
}
