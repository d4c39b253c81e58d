#pragma once
// What `flexpipe run` and `flexpipe train` share: the model, the batch, the optimizer, the schedule
// options, and the checks that turn them into a runtime request before any rank connects.
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "flexpipe/runtime/run_request.h"
#include "flexpipe/train/trainable_model.h"
#include "options.h"

namespace flexpipe::cli {

struct TrainingCommand {
  std::vector<std::string> schedules;
  ScheduleOptions schedule;  // -p, -m, -v, -D for every schedule
  ModelSize model;
  std::string partition;
  std::string plan;            // a partition plan file (--plan)
  std::string captured_model;  // train --model: a cost graph from `flexpipe capture` (trained through its export)
  runtime::RunRequest request;
  std::vector<std::string> hooks;
};

// --device's help, for run, train and profile.
inline constexpr const char* kDeviceHelp =
    "Where each rank trains: cpu, cuda (each rank the GPU of its LOCAL_RANK) or cuda:N (every rank GPU N) [cpu]";

// --family and --kv-heads: the model's layout (gpt or llama) and its key/value heads.
void add_model_family_options(CLI::App* command, ModelSize& model);

// -p/-m/-v/-D, the model's size, --family, --kv-heads, --microbatch-size, --partition, --seed, --optimizer, --lr,
// --weight-decay, --dtype, --timeout, --trace, --svg, --json, --hook. Each help text shows the default
// `options` holds when called, so that run and train each describe their own; `devices_default` is -p's.
void add_training_options(CLI::App* command, TrainingCommand& options, const std::string& devices_default);

// Fills options.request from the environment and the options: validates every schedule, checks that
// the job's ranks match (devices x data-parallel copies), computes each schedule's partition.
// Throws Error before anything is loaded or connected.
void prepare_request(TrainingCommand& options);
// The same for a job that is not started yet: as rank 0 of `world_size` ranks, so that a launcher
// finds every torch-free mistake (schedule, plan, partition, model) once, before any rank exists.
void prepare_request(TrainingCommand& options, const runtime::RankEnv& env);

}  // namespace flexpipe::cli
