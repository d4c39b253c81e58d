// The timing report of a training run over its timed steps (docs/fidelity.md): the measured step's
// median and spread, the simulator's step from the mean action times, where each rank's time went in
// both, and each rank's activation memory measured beside the simulated. The session fills it; its
// JSON, its text and its timelines are written from it.
#pragma once
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "flexpipe/costs/cost_graph.h"
#include "flexpipe/costs/stage_aggregation.h"
#include "flexpipe/ir/schedule.h"
#include "flexpipe/sim/simulator.h"
#include "flexpipe/train/measured_timeline.h"

namespace flexpipe::runtime {

struct TimingReport {
  struct Spread {
    double min = 0, p25 = 0, p75 = 0, max = 0;
  };
  struct Link {  // what the timed steps' messages took, in ms
    double latency = 0, send_cpu = 0, receive_cpu = 0, rendezvous = 0;
  };
  struct RankTimes {  // medians over the timed steps, in ms
    int rank = 0;
    TimeBreakdown measured, simulated;
  };
  struct RankMemory {
    int rank = 0;
    double measured_peak_saved_bytes = 0;        // the executor's, in the last timed step
    double simulated_peak_activation_bytes = 0;  // from the cost graph's per-operator saved bytes
  };

  int first_step = 0;  // index of the first timed step
  int count = 0;
  double measured_makespan_ms = 0;  // median
  Spread measured_makespan_spread_ms;
  double predicted_makespan_ms = 0;
  double gap_percent = 0;            // (measured - predicted) / measured: positive when the simulation is shorter
  double measured_bubble_ratio = 0;  // median
  double predicted_bubble_ratio = 0;
  Link measured_link_ms;
  std::vector<RankTimes> breakdown_ms;
  std::string prediction_note;  // why the prediction cannot match, or empty
  std::vector<RankMemory> memory;

  // What the timelines draw: the last timed step as measured, and the simulation of the schedule with
  // the measured action times.
  SimResult measured_last;
  Schedule simulated_schedule;
  SimResult predicted;
};

// What the report is made from.
struct TimingInputs {
  const Schedule& lowered;
  const std::vector<MeasuredStep>& steps;  // replica 0's timed steps, at least one
  int last_step = 0;                       // index of the last timed step
  std::vector<double> peak_saved_bytes;    // per rank, in the last timed step
  const CostGraph& graph;
  const Partition& partition;
  AggregationOptions aggregation;
  bool scripted = false;  // a captured model's pieces keep their graphs, checkpoints included, from I to W
  std::string prediction_note;
};

TimingReport make_timing_report(const TimingInputs& inputs);

// Adds the report's keys to a run's JSON object (docs/runtime.md, "The report").
void add_timing_json(const TimingReport& report, nlohmann::json& run);

// The report's lines of `flexpipe train`'s text output.
void print_timing(const TimingReport& report);

// The measured timeline as a Chrome trace and as SVG (beside the simulated one), where a path is given.
void write_timelines(const TimingReport& report, const Schedule& lowered, const std::string& trace_path,
                     const std::string& svg_path);

}  // namespace flexpipe::runtime
