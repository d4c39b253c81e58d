// train --schedule auto: measure the model (or read its measurements), search the schedule space with
// them (flexpipe search, docs/search.md) and choose what to train, by the margin the search applies.
#pragma once
#include <string>

#include "flexpipe/workflow/training_request.h"

namespace flexpipe {

// Where --schedule auto writes what it chose for a captured model, next to its graph:
// GRAPH.auto-plan.json, GRAPH.auto-schedule.fps (GRAPH without its .json).
std::string auto_path(const std::string& captured_model, const std::string& what);

// Resolves request.schedule == "auto" in the request itself: the schedule chosen (a built-in's name or
// the search's program, written next to the profile or the captured graph), its partition (--partition
// ops:..., or a plan file for a captured model, whose export is cut by it), and request.auto_choice for
// the ranks to come. Before any rank starts; inside a job every rank searches for itself, on a count of
// simulations rather than time, so that every rank chooses the same. Prints the choice (rank 0).
// Returns 0, or the exit code of a profile that failed (its error printed already); throws Error.
int resolve_auto_schedule(TrainRequest& request);

}  // namespace flexpipe
