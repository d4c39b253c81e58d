// Exporting a captured model's trained weights: every parameter and buffer of every chunk, by the
// original model's state_dict names, in one file rank 0 writes with torch::pickle_save (torch.load
// reads it into a dict for load_state_dict).
#pragma once
#include <chrono>
#include <string>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>

#include "flexpipe/interop/export_manifest.h"
#include "flexpipe/ir/schedule.h"
#include "transport/transport.h"

namespace flexpipe::runtime {

struct WeightExport {
  std::string path;    // the file rank 0 writes
  bool quiet = false;  // no line saying where the weights went (--json)
  int last_step = 0;   // for the message of a peer failing the gathering
  std::chrono::milliseconds timeout{60000};
};

// Every rank adds what it holds of replica 0's pipeline (its `state`, as Executor::state() names it)
// into one buffer of all the weights, summed over the job: the others add zeros, so the values arrive
// exactly. A collective: every rank of `world` calls it.
void export_weights(const ExportManifest& manifest, const std::vector<std::pair<std::string, at::Tensor>>& state,
                    const Schedule& schedule, int replica, Transport& world, const WeightExport& where);

}  // namespace flexpipe::runtime
