// libFuzzer target for the schedule JSON reader; what it reads round-trips through the writer.
#include "flexpipe/interop/schedule_json.h"
#include "fuzz_target.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  flexpipe::fuzz::check_round_trip("schedule JSON", data, size, flexpipe::parse_schedule_json,
                                   flexpipe::write_schedule_json);
  return 0;
}
