// --export-weights DIR/: a captured transformers model's trained weights as a folder from_pretrained loads.
#pragma once

#include <string>

#include "flexpipe/workflow/training_request.h"

namespace flexpipe {

// Whether --export-weights names a folder (ends with '/' or is one) rather than a FILE.pt. Then every
// process of the run writes the weights file into it (export_weights becomes DIR/flexpipe-weights.pt,
// the folder is made) and `pretrained_dir` keeps the folder. Before any rank starts.
void resolve_pretrained_folder(TrainRequest& o);

// After a run that ended with `code`: the folder's config.json and model.safetensors, written by the Python
// package from the weights file (which is then removed). Returns the run's code, or the package's.
int write_pretrained_folder(const TrainRequest& o, int code);

}  // namespace flexpipe
