// libFuzzer target for the checkpoint file reader (torch-free half); what it reads round-trips
// through the writer.
#include "flexpipe/train/checkpoint_file.h"
#include "fuzz_target.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  flexpipe::fuzz::check_round_trip(
      "checkpoint", data, size,
      [](const std::string& bytes, const std::string& origin) {
        return flexpipe::parse_checkpoint_file(bytes, origin);
      },
      flexpipe::checkpoint_file_bytes);
  return 0;
}
