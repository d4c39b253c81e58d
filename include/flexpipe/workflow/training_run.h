// flexpipe train's run: the request checked, --schedule auto resolved, a captured model's export made,
// then either this process trains (a rank of a job, or alone) or it launches the job's local ranks.
#pragma once
#include <string>
#include <vector>

#include "flexpipe/workflow/training_request.h"

namespace flexpipe {

// What each launched rank runs: this process's command line with the resolved choice in place of what
// it resolved (--schedule, and a searched program's -p / -m / -v, which the program fixes itself),
// and the partition or plan it chose. Without a choice, the command line as it is.
std::vector<std::string> rank_command_line(const std::vector<std::string>& command_line,
                                           const std::optional<AutoChoice>& choice);

// Trains as the request says; `command_line` is this process's argv, which a launcher gives its ranks
// (rank_command_line). Returns the exit code: the runtime's, the launcher's, or that of a failed profile
// or export (its error printed already); throws Error for what is wrong before anything starts.
int train(TrainRequest& request, const std::vector<std::string>& command_line);

}  // namespace flexpipe
