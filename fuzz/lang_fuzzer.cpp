// libFuzzer target for the schedule language: any input either compiles or throws flexpipe::Error,
// never crashes, hangs or leaks; and what compiles round-trips through write_program.
#include <cstdint>
#include <cstdlib>
#include <string>

#include "flexpipe/lang/parameters.h"
#include "flexpipe/lang/program.h"
#include "flexpipe/lang/writer.h"
#include "flexpipe/support/error.h"
#include "flexpipe/validate/validator.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  flexpipe::CompileOptions options;
  options.max_steps = 200'000;  // small enough that a runaway input ends in milliseconds
  try {
    flexpipe::program_parameters(text, "fuzz.fps");
  } catch (const flexpipe::Error&) {}
  flexpipe::CompiledProgram program;
  try {
    program = flexpipe::compile_program(text, "fuzz.fps", {}, options);
  } catch (const flexpipe::Error&) {
    return 0;
  }
  flexpipe::locate_diagnostics(program, flexpipe::validate(program.schedule));
  std::string written;
  try {
    written = flexpipe::write_program(program.schedule);
  } catch (const flexpipe::Error&) {
    return 0;  // e.g. an action the language can emit but the IR text cannot carry
  }
  options.max_steps = 100'000'000;
  if (!(flexpipe::compile_program(written, "fuzz.fps", {}, options).schedule == program.schedule)) std::abort();
  return 0;
}
