// What `flexpipe run` hands to the runtime library: everything is decided and checked (schedules
// validated, partitions computed) before any process talks to another. Torch-free, so the CLI can
// build a request without loading libtorch; the runtime is loaded on demand (runtime_loader.h).
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "flexpipe/costs/cost_graph.h"
#include "flexpipe/costs/model_zoo.h"
#include "flexpipe/costs/stage_aggregation.h"
#include "flexpipe/ir/schedule.h"
#include "flexpipe/train/rank_env.h"

namespace flexpipe::runtime {

struct TrainingOptions {
  int steps = 2;
  uint64_t seed = 1234;
  int microbatch_size = 2;          // samples per micro-batch; a step sees microbatches * this
  std::string optimizer = "adamw";  // "sgd" or "adamw"
  double learning_rate = 1e-3;
  double weight_decay = 0.0;
  std::string dtype = "float32";  // "float32" or "float64"
  std::string data;               // a text file (byte-level tokens, vocabulary 256); "": synthetic data
  bool lr_schedule = false;       // warm-up + cosine decay (below) instead of a constant rate
  int warmup_steps = 0;
  int decay_steps = 0;  // 0 with lr_schedule: decay over the steps after warm-up
  double min_lr_ratio = 0.1;
  double max_grad_norm = 0;  // clip by the global norm; 0: never
};

// One schedule to train, with the operator ranges of its model chunks.
struct ScheduledRun {
  Schedule schedule;    // valid; compute-only or lowered (the runtime lowers it again)
  Partition partition;  // num_stages == schedule.stages_per_pipeline
};

// Testing aid: makes one rank fail at a chosen action, so the others' reaction can be checked.
struct FaultInjection {
  int rank = -1;  // -1: none
  int step = 0;
  int action = 0;     // index in the rank's lowered action list
  bool hang = false;  // false: the process dies (SIGKILL); true: it stops answering
};

struct RunRequest {
  std::vector<ScheduledRun> runs;  // trained one after another, each from the same initial weights
  int data_parallel = 1;           // D copies of the pipeline; the job has D x devices ranks
  ModelConfig model;               // a GPT-style decoder (runtime_model.h lists what is supported)
  // Or a captured PyTorch model (flexpipe capture): its cost graph and the directory `flexpipe export`
  // cut it into for the runs' partition (docs/export.md). training.data is then a torch.save'd dict.
  CostGraph captured_graph;
  std::string export_dir;      // "": the GPT-style model above
  std::string export_weights;  // write the trained weights by their state_dict names (torch.load reads it); "" none
  bool export_weights_quietly = false;  // a file the launcher makes a folder of: its own line says what was written
  TrainingOptions training;
  RankEnv env;
  std::string device = "cpu";   // --device: cpu, cuda or cuda:N (flexpipe/train/device.h)
  double timeout_seconds = 60;  // a peer silent this long fails the job
  bool verify = false;          // compare with a single-process run of the same model and batch
  double tolerance = 1e-6;      // relative, per tensor: max|a - b| / max|b|
  // Steps at the start the timing report leaves out (the allocator and caches warm up); -1: a fifth
  // of the steps run, at least one when two or more run.
  int timing_warmup = -1;
  std::string trace_path;  // measured Perfetto trace (rank 0 writes the merged one); "" none
  std::string svg_path;    // measured SVG timeline; "" none
  std::string curve_path;  // the loss curve as SVG (rank 0); "" none
  bool json = false;
  bool progress = false;                     // a line per step: loss, tokens/s, step time, measured bubble (rank 0)
  std::string checkpoint_dir;                // "" none
  int save_every = 0;                        // steps between checkpoints (0: only at the end)
  bool resume = false;                       // continue from the latest checkpoint in checkpoint_dir
  std::map<std::string, std::string> hooks;  // custom operation name -> built-in hook spec (hooks.h)
  // Per cost-graph node (docs/runtime.md): what R recomputes and what OFFLOAD moves of a (stage,
  // micro-batch) the schedule recomputes or offloads. Empty: R recomputes and OFFLOAD moves everything.
  std::vector<MemoryDecision> memory_decisions;
  // Per model chunk: OFFLOAD moves the recompute checkpoints too. Empty: none.
  std::vector<char> offload_checkpoints;
  FaultInjection fault;
};

// What `flexpipe profile` hands to the runtime: measure the model's operators on this machine.
struct ProfileRequest {
  ModelConfig model;
  int microbatch_size = 2;
  std::string dtype = "float32";
  uint64_t seed = 1234;
  std::string device = "cpu";  // --device, as RunRequest's
  int warmup = 2;
  int repeats = 7;
  std::string output;  // the measured cost graph (JSON); "" none
  bool json = false;   // print the graph instead of the table
  bool quiet = false;  // print nothing (train --schedule auto profiles for itself)
  // > 0: also measure the transport between two ranks of this machine, whose rendezvous listens on
  // 127.0.0.1 at this port, and store it as the graph's link.
  int transport_port = 0;
};

}  // namespace flexpipe::runtime
