// libFuzzer target for the schedule JSON reader; what it reads round-trips through the writer.
#include "flexpipe/interop/schedule_json.h"
#include "fuzz_target.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace flexpipe;
  Schedule schedule;
  if (!fuzz::reads([&] { schedule = parse_schedule_json(fuzz::input_text(data, size), "fuzz.json"); })) return 0;
  const std::string written = write_schedule_json(schedule);
  if (parse_schedule_json(written, "written.json") != schedule) fuzz::round_trip_failed("schedule JSON", written);
  return 0;
}
