// The training session's bookkeeping collectives over the whole job: every rank's number, every
// rank's trace of a step, and the failure of a peer during them named with the step and the purpose.
#pragma once
#include <chrono>
#include <functional>
#include <string_view>
#include <vector>

#include "executor/executor.h"
#include "flexpipe/train/measured_timeline.h"
#include "transport/transport.h"

namespace flexpipe::runtime {

// Every rank's value of `x`, in rank order, on every rank.
std::vector<double> gather(Transport& transport, double x, std::chrono::milliseconds timeout);

// Every rank's trace of the step, on every rank (padded to the longest list).
std::vector<std::vector<MeasuredAction>> gather_all_traces(Transport& transport, const std::vector<ActionRecord>& mine,
                                                           std::chrono::milliseconds timeout);

// The job's traces as one step of each pipeline replica (global rank = replica * devices + device).
std::vector<MeasuredStep> split_by_replica(std::vector<std::vector<MeasuredAction>> all, int devices);

// Runs bookkeeping collectives; a peer that fails them is reported as a PeerFailure with the rank, the
// step and what was being gathered, as the executor reports its own.
void collective(const Transport& world, int step, std::string_view what, const std::function<void()>& body);

}  // namespace flexpipe::runtime
