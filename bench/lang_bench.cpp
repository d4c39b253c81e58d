// Compile time of library programs at scale: 64 devices x 1024 micro-batches (target: under 1 s).
#include <benchmark/benchmark.h>

#include <filesystem>

#include "flexpipe/interop/schedule_io.h"
#include "flexpipe/lang/program.h"
#include "flexpipe/support/files.h"

namespace {

// The library beside this file's directory (CMake compiles it by absolute path).
const std::string kLibrary =
    std::filesystem::path(__FILE__).parent_path().parent_path().string() + "/examples/schedules/";

void compile(benchmark::State& state, const char* name, std::map<std::string, int64_t> defines) {
  const std::string text = flexpipe::read_text_file(kLibrary + name + ".fps");
  flexpipe::CompileOptions options;
  options.max_steps = 100'000'000;
  int64_t actions = 0;
  for (auto _ : state) {
    const flexpipe::CompiledProgram program = flexpipe::compile_program(text, name, defines, options);
    actions = program.schedule.num_actions();
    benchmark::DoNotOptimize(actions);
  }
  state.counters["actions"] = static_cast<double>(actions);
}

}  // namespace

BENCHMARK_CAPTURE(compile, 1f1b_64x1024, "1f1b", {{"p", 64}, {"m", 1024}})->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(compile, zb_h2_64x1024, "zb-h2", {{"p", 64}, {"m", 1024}})->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(compile, interleaved_64x1024_v2, "interleaved-1f1b", {{"p", 64}, {"m", 1024}, {"v", 2}})
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(compile, zb_v_64x1024, "zb-v", {{"p", 64}, {"m", 1024}})->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(compile, dualpipev_64x1024, "dualpipev", {{"p", 64}, {"m", 1024}})->Unit(benchmark::kMillisecond);

BENCHMARK_MAIN();
