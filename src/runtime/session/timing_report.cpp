// Making the timing report from the timed steps' traces and the simulator, and writing it as JSON, text and timelines.
#include "session/timing_report.h"

#include <cmath>
#include <cstdio>

#include <fmt/format.h>

#include "flexpipe/support/files.h"
#include "flexpipe/support/quantity.h"
#include "flexpipe/support/statistics.h"
#include "flexpipe/views/views.h"
#include "session/run_report.h"

namespace flexpipe::runtime {

namespace {

// Width over height of the measured timelines: a wide screen's shape, readable without scrolling.
constexpr double kMeasuredTimelineAspect = 4;

// The simulator's activation peak per device from the cost graph's per-operator saved bytes, next to
// the peak the executor held. The actions take their measured times, so that what is saved and freed
// happens in the order the ranks ran it (a captured graph without timings would otherwise put every
// action at time 0, where frees come first and no peak is seen).
std::vector<TimingReport::RankMemory> memory_peaks(const TimingInputs& in, const Schedule& timed,
                                                   const CostTable& costs) {
  const StageAggregate aggregate = aggregate_stages(in.graph, in.partition, in.aggregation);
  CostTable held = aggregate.table;
  for (size_t k = 0; k < held.stages.size(); ++k) {
    StageCosts& s = held.stages[k];
    const StageCosts& t = costs.stages[k];
    s.forward = t.forward, s.backward_input = t.backward_input, s.backward_weight = t.backward_weight;
    s.backward = t.backward, s.recompute = t.recompute, s.optimizer = t.optimizer;
    s.checkpoint_until_weight = in.scripted;
  }
  held.link = costs.link, held.host_link = costs.host_link, held.pairs.clear();
  const SimResult modelled = simulate(timed, held, {false, true});
  std::vector<TimingReport::RankMemory> memory;
  for (int d = 0; d < in.lowered.num_devices; ++d)
    memory.push_back({d, in.peak_saved_bytes[d], modelled.devices[d].peak_memory - modelled.devices[d].static_memory});
  return memory;
}

nlohmann::json breakdown_json(const TimeBreakdown& b) {
  return {{"compute", b.compute}, {"transfer", b.transfer}, {"waiting", b.waiting}, {"overhead", b.overhead}};
}

}  // namespace

TimingReport make_timing_report(const TimingInputs& in) {
  const Schedule& lowered = in.lowered;
  const int devices = lowered.num_devices;
  std::vector<double> makespans, bubbles;
  std::vector<std::vector<TimeBreakdown>> parts(devices);
  for (const MeasuredStep& step : in.steps) {
    const SimResult r = measured_result(lowered, step);
    makespans.push_back(r.makespan);
    bubbles.push_back(r.bubble_ratio);
    const std::vector<TimeBreakdown> breakdown = measured_breakdown(lowered, step);
    for (int d = 0; d < devices; ++d) parts[d].push_back(breakdown[d]);
  }
  TimingReport report;
  report.measured_last = measured_result(lowered, in.steps.back());
  report.simulated_schedule = with_measured_custom_durations(lowered, in.steps);
  const Schedule& timed = report.simulated_schedule;
  const CostTable costs = measured_costs(lowered, in.steps);
  report.predicted = simulate(timed, costs, {true, false});
  // The views report efficiency against the lower bound of the same measured costs.
  SimResult& measured = report.measured_last;
  measured.lower_bound = lower_bound(timed, costs);
  measured.efficiency = measured.makespan > 0 ? measured.lower_bound / measured.makespan : 0;

  const double median_makespan = median(makespans);
  report.count = static_cast<int>(in.steps.size());
  report.first_step = in.last_step + 1 - report.count;
  report.measured_makespan_ms = median_makespan;
  report.measured_makespan_spread_ms = {quantile(makespans, 0), quantile(makespans, 0.25), quantile(makespans, 0.75),
                                        quantile(makespans, 1)};
  report.predicted_makespan_ms = report.predicted.makespan;
  report.gap_percent =
      median_makespan > 0 ? 100 * (median_makespan - report.predicted.makespan) / median_makespan : 0.0;
  report.measured_bubble_ratio = median(bubbles);
  report.predicted_bubble_ratio = report.predicted.bubble_ratio;
  report.measured_link_ms = {costs.link.latency, costs.link.send_cpu, costs.link.receive_cpu, costs.link.rendezvous};
  const std::vector<TimeBreakdown> simulated = simulated_breakdown(timed, report.predicted);
  for (int d = 0; d < devices; ++d) {
    auto component = [&](double TimeBreakdown::*field) {
      std::vector<double> values;
      for (const TimeBreakdown& p : parts[d]) values.push_back(p.*field);
      return median(values);
    };
    const TimeBreakdown measured_median{component(&TimeBreakdown::compute), component(&TimeBreakdown::transfer),
                                        component(&TimeBreakdown::waiting), component(&TimeBreakdown::overhead)};
    report.breakdown_ms.push_back({d, measured_median, simulated[d]});
  }
  report.prediction_note = in.prediction_note;
  report.memory = memory_peaks(in, timed, costs);
  return report;
}

void add_timing_json(const TimingReport& r, nlohmann::json& j) {
  j["timed_steps"] = {{"first", r.first_step}, {"count", r.count}};
  j["measured_makespan_ms"] = r.measured_makespan_ms;
  const TimingReport::Spread& spread = r.measured_makespan_spread_ms;
  j["measured_makespan_spread_ms"] = {{"min", spread.min},
                                      {"p25", spread.p25},
                                      {"p75", spread.p75},
                                      {"max", spread.max}};
  j["predicted_makespan_ms"] = r.predicted_makespan_ms;
  j["gap_percent"] = r.gap_percent;
  j["measured_bubble_ratio"] = r.measured_bubble_ratio;
  j["predicted_bubble_ratio"] = r.predicted_bubble_ratio;
  j["measured_link_ms"] = {{"latency", r.measured_link_ms.latency},
                           {"send_cpu", r.measured_link_ms.send_cpu},
                           {"receive_cpu", r.measured_link_ms.receive_cpu},
                           {"rendezvous", r.measured_link_ms.rendezvous}};
  j["breakdown_ms"] = nlohmann::json::array();
  for (const TimingReport::RankTimes& b : r.breakdown_ms)
    j["breakdown_ms"].push_back(
        {{"rank", b.rank}, {"measured", breakdown_json(b.measured)}, {"simulated", breakdown_json(b.simulated)}});
  if (!r.prediction_note.empty()) j["prediction_note"] = r.prediction_note;
  nlohmann::json memory = nlohmann::json::array();
  for (const TimingReport::RankMemory& m : r.memory)
    memory.push_back({{"rank", m.rank},
                      {"measured_peak_saved_bytes", m.measured_peak_saved_bytes},
                      {"simulated_peak_activation_bytes", m.simulated_peak_activation_bytes}});
  j["memory"] = memory;
}

void print_timing(const TimingReport& r) {
  fmt::print(
      "  steps {}-{} ({} timed): measured {:.2f} ms median (quartiles {:.2f}-{:.2f}, bubble {:.1f}%), simulated "
      "from the mean action times {:.2f} ms (bubble {:.1f}%): {:.1f}% {}\n",
      r.first_step + 1, r.first_step + r.count, r.count, r.measured_makespan_ms, r.measured_makespan_spread_ms.p25,
      r.measured_makespan_spread_ms.p75, 100 * r.measured_bubble_ratio, r.predicted_makespan_ms,
      100 * r.predicted_bubble_ratio, std::abs(r.gap_percent),
      r.gap_percent >= 0 ? "below the measurement" : "above the measurement");
  fmt::print("  {:<8} {:>28} | {:>28}\n", "ms", "measured (median)", "simulated");
  fmt::print("  {:<8} {:>9}{:>10}{:>9}{:>10} | {:>9}{:>10}{:>9}\n", "", "compute", "transfer", "waiting", "overhead",
             "compute", "transfer", "waiting");
  for (const TimingReport::RankTimes& b : r.breakdown_ms) {
    const TimeBreakdown &m = b.measured, &p = b.simulated;
    fmt::print("  rank {:<3} {:>9.2f}{:>10.2f}{:>9.2f}{:>10.2f} | {:>9.2f}{:>10.2f}{:>9.2f}\n", b.rank, m.compute,
               m.transfer, m.waiting, m.overhead, p.compute, p.transfer, p.waiting);
  }
  if (!r.prediction_note.empty()) fmt::print("  note: {}\n", r.prediction_note);
  for (const TimingReport::RankMemory& m : r.memory)
    fmt::print("  rank {}: peak saved activations {} measured, {} simulated from the cost graph\n", m.rank,
               format_bytes(m.measured_peak_saved_bytes), format_bytes(m.simulated_peak_activation_bytes));
}

void write_timelines(const TimingReport& r, const Schedule& lowered, const std::string& trace_path,
                     const std::string& svg_path) {
  if (!trace_path.empty()) write_text_file(trace_path, render_trace(lowered, r.measured_last, "ms"));
  if (svg_path.empty()) return;
  // Measured steps hold actions far shorter than the rest (sends, the optimizer): the aspect is
  // capped so that the picture stays a timeline rather than a strip.
  const TimelineStyle style{"ms", kMeasuredTimelineAspect};
  write_text_file(svg_path, render_svg(lowered, r.measured_last, style));
  // The simulator's timeline for the same measured action times, next to it.
  write_text_file(with_suffix(svg_path, ".simulated"), render_svg(r.simulated_schedule, r.predicted, style));
}

}  // namespace flexpipe::runtime
