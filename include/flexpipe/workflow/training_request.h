// What `flexpipe run` and `flexpipe train` hand the runtime: the model, the batch, the optimizer, the
// schedules and their partition, and the checks that turn them into a runtime request before any rank
// connects. Resolved values (train's automatic choice) travel here, never as edited command lines.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "flexpipe/runtime/run_request.h"
#include "flexpipe/train/rank_env.h"
#include "flexpipe/train/trainable_model.h"
#include "flexpipe/workflow/schedule_loading.h"

namespace flexpipe {

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

// Fills options.request from the environment and the options: validates every schedule, checks that
// the job's ranks match (devices x data-parallel copies), computes each schedule's partition.
// Throws Error before anything is loaded or connected.
void prepare_request(TrainingCommand& options);
// The same for a job that is not started yet: as rank 0 of `world_size` ranks, so that a launcher
// finds every torch-free mistake (schedule, plan, partition, model) once, before any rank exists.
void prepare_request(TrainingCommand& options, const runtime::RankEnv& env);

// What train chose itself (--schedule auto, or a captured model's plan when --plan is not given),
// resolved once before any rank starts: the ranks receive it (rank_command_line, training_run.h) rather
// than search or partition again.
struct AutoChoice {
  std::string schedule;           // a built-in's name, or the search's program written to a file
  bool searched_program = false;  // the search's own program: it fixes its devices, micro-batches and chunks
  std::string partition;          // the built-in model: the searched partition as ops:N,...
  std::string plan;               // a captured model: the plan file written for its export
};

// flexpipe train's request: the training request and what train adds to it.
struct TrainRequest {
  TrainingCommand command;
  std::string schedule = "1f1b";  // a built-in's name, a file, or auto
  std::string profile;            // measured cost graph for --schedule auto: read if it exists, else written
  // The least predicted gain over the fastest built-in for which --schedule auto trains the search's
  // own program rather than that built-in (docs/fidelity.md).
  double auto_margin = 0.05;
  bool auto_margin_given = false;
  std::string export_tolerance;  // passed to the export of a captured --model; empty: its own
  std::string pretrained_dir;    // --export-weights DIR/: the transformers folder to write (pretrained_folder.h)
  // Set by resolve_auto_schedule (auto_schedule.h) and partition_captured_model (captured_plan.h).
  std::optional<AutoChoice> auto_choice;
};

// -p's default for train's built-in schedules.
inline constexpr int kDefaultTrainDevices = 2;
// The pipeline's devices: a built-in (or auto) runs on -p (default 2); -D p=N, or a file, makes the program say.
int pipeline_devices(const TrainRequest& request);

}  // namespace flexpipe
