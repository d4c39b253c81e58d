// Tests of the views: the text grid, the SVG timeline, the Perfetto trace and the reports.
#include "flexpipe/views/views.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "flexpipe/ir/lowering.h"
#include "flexpipe/support/error.h"

namespace flexpipe {
namespace {

using nlohmann::json;
using K = ActionKind;

// 1F1B on 2 devices, 2 micro-batches, F = 1, B = 2, sends free, in lowered form:
//   d0: F0 [0,1) F1 [1,2)             B0 [4,6)    B1 [7,9)
//   d1:          F0 [1,2) B0 [2,4) F1 [4,5) B1 [5,7)
// Each F holds 1 unit of activation until its B ends; device 0 has a capacity of 2.
struct Case {
  Schedule schedule;
  SimResult result;
};

Case one_f_one_b() {
  Case c;
  c.schedule = make_schedule("demo", 2, 2, {0, 1});
  auto& d0 = c.schedule.device_actions[0];
  auto& d1 = c.schedule.device_actions[1];
  d0 = {Action::make(K::F, 0, 0),     Action::make(K::SendF, 0, 0), Action::make(K::F, 0, 1),
        Action::make(K::SendF, 0, 1), Action::make(K::RecvB, 0, 0), Action::make(K::B, 0, 0),
        Action::make(K::RecvB, 0, 1), Action::make(K::B, 0, 1)};
  d1 = {Action::make(K::RecvF, 1, 0), Action::make(K::F, 1, 0), Action::make(K::B, 1, 0), Action::make(K::SendB, 1, 0),
        Action::make(K::RecvF, 1, 1), Action::make(K::F, 1, 1), Action::make(K::B, 1, 1), Action::make(K::SendB, 1, 1)};
  SimResult& r = c.result;
  r.timeline = {{{0, 1}, {1, 1}, {1, 2}, {2, 2}, {1, 1}, {4, 6}, {2, 2}, {7, 9}},
                {{0, 0}, {1, 2}, {2, 4}, {4, 4}, {2, 2}, {4, 5}, {5, 7}, {7, 7}}};
  r.transfers = {{0, 1, 0, 1, 1, {1, 1}}, {0, 1, 0, 3, 1, {2, 2}}, {1, 0, 1, 3, 1, {4, 4}}, {1, 0, 1, 7, 1, {7, 7}}};
  r.makespan = 9;
  r.bubble_ratio = 6.0 / 18;
  r.lower_bound = 6;
  r.efficiency = 6.0 / 9;
  r.comm_bytes = 4;
  r.comm_transfers = 4;
  DeviceReport dev0;
  dev0.busy = 6, dev0.idle = 3, dev0.peak_memory = 2, dev0.peak_time = 1, dev0.capacity = 2;
  dev0.memory = {{0, 1}, {1, 2}, {6, 1}, {9, 0}};
  DeviceReport dev1;
  dev1.busy = 6, dev1.idle = 3, dev1.peak_memory = 1, dev1.peak_time = 1;
  dev1.memory = {{1, 1}, {4, 0}, {4, 1}, {7, 0}};
  r.devices = {dev0, dev1};
  return c;
}

// One device running `actions` back to back, each `durations[i]` long.
Case single_device(int stages, std::vector<Action> actions, std::vector<double> durations) {
  Case c;
  c.schedule = make_schedule("solo", 1, 4, std::vector<int32_t>(stages, 0));
  c.schedule.device_actions[0] = std::move(actions);
  double now = 0;
  c.result.timeline.assign(1, {});
  for (double d : durations) {
    c.result.timeline[0].push_back({now, now + d});
    now += d;
  }
  c.result.makespan = now;
  c.result.devices.assign(1, DeviceReport{});
  return c;
}

CustomOpKind custom_kind(std::string name, bool communicates = false, bool per_microbatch = true) {
  CustomOpKind kind;
  kind.name = std::move(name);
  kind.communicates = communicates;
  kind.per_microbatch = per_microbatch;
  return kind;
}

size_t count(const std::string& text, const std::string& needle) {
  size_t n = 0;
  for (size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + needle.size())) ++n;
  return n;
}

// The line of `text` that holds `needle` (the SVG writer puts one element per line).
std::string line_with(const std::string& text, const std::string& needle) {
  const size_t at = text.find(needle);
  if (at == std::string::npos) return "";
  const size_t begin = text.rfind('\n', at) + 1;
  return text.substr(begin, text.find('\n', at) - begin);
}

// Every element closed, in order; comments, processing instructions and self-closing tags allowed.
// Returns the first problem, or "" when the document is balanced with a single root.
std::string check_balanced(const std::string& xml) {
  std::vector<std::string> open;
  int roots = 0;
  for (size_t at = xml.find('<'); at != std::string::npos; at = xml.find('<', at + 1)) {
    const size_t close = xml.find('>', at);
    if (close == std::string::npos) return "unterminated tag at " + std::to_string(at);
    const std::string tag = xml.substr(at + 1, close - at - 1);
    if (tag.starts_with("?") || tag.starts_with("!")) continue;
    if (tag.starts_with("/")) {
      const std::string name = tag.substr(1);
      if (open.empty() || open.back() != name) return "unexpected </" + name + "> at " + std::to_string(at);
      open.pop_back();
      continue;
    }
    const std::string name = tag.substr(0, tag.find_first_of(" \n/"));
    if (open.empty()) ++roots;
    if (!tag.ends_with("/")) open.push_back(name);
  }
  if (!open.empty()) return "<" + open.back() + "> never closed";
  if (roots != 1) return std::to_string(roots) + " root elements";
  // Text and attributes: no raw '<' inside a tag, every '&' starts an entity.
  for (size_t at = xml.find('&'); at != std::string::npos; at = xml.find('&', at + 1)) {
    const size_t semicolon = xml.find(';', at);
    const std::string entity = xml.substr(at, semicolon == std::string::npos ? 6 : semicolon - at + 1);
    if (entity != "&amp;" && entity != "&lt;" && entity != "&gt;" && entity != "&quot;" && entity != "&apos;")
      return "bad entity " + entity;
  }
  return "";
}

// ---- grid -------------------------------------------------------------------------------------

TEST(Grid, ShowsEachComputeActionAndTheBubbles) {
  const Case c = one_f_one_b();
  EXPECT_EQ(render_grid(c.schedule, c.result),
            "t  |0\n"
            "d0 |F0 F1 .  .  B0 -- .  B1 --\n"
            "d1 |.  F0 B0 -- F1 B1 -- .  .\n"
            "legend: F forward, B backward; -- continues, . idle; 1 column = 1 time unit\n");
}

TEST(Grid, ACoarserStepShowsWhatRunsAtEachColumnsMidpoint) {
  const Case c = one_f_one_b();
  // Columns cover [0,2) [2,4) [4,6) [6,8): midpoints 1, 3, 5, 7.
  EXPECT_EQ(render_grid(c.schedule, c.result, 2),
            "t  |0\n"
            "d0 |F1 .  B0 B1\n"
            "d1 |F0 B0 B1 .\n"
            "legend: F forward, B backward; -- continues, . idle; 1 column = 2 time units\n");
}

TEST(Grid, RulerMarksEveryTenthColumnAndCellsWidenForLongLabels) {
  std::vector<Action> actions;
  std::vector<double> durations;
  for (int m = 0; m < 12; ++m) {
    actions.push_back(Action::make(K::F, 0, m));
    durations.push_back(0.5);
  }
  Case c = single_device(1, actions, durations);
  c.schedule.num_microbatches = 12;
  EXPECT_EQ(render_grid(c.schedule, c.result),
            "t  |0" + std::string(39, ' ') +
                "5\n"
                "d0 |F0  F1  F2  F3  F4  F5  F6  F7  F8  F9  F10 F11\n"
                "legend: F forward; -- continues, . idle; 1 column = 0.5 time units\n");
}

TEST(Grid, LowerCaseMarksTheSecondChunkOfADevice) {
  const Case c = single_device(2,
                               {Action::make(K::F, 0, 0), Action::make(K::F, 1, 0), Action::make(K::I, 1, 0),
                                Action::make(K::I, 0, 0), Action::make(K::W, 1, 0), Action::make(K::W, 0, 0)},
                               {1, 1, 1, 1, 1, 1});
  EXPECT_EQ(render_grid(c.schedule, c.result),
            "t  |0\n"
            "d0 |F0 f0 i0 I0 w0 W0\n"
            "legend: F forward, I input gradient, W weight gradient; -- continues, . idle; 1 column = 1 time unit; "
            "lower case: second chunk on the device\n");
}

TEST(Grid, MoreThanTwoChunksArePrefixedWithTheirNumber) {
  const Case c =
      single_device(3, {Action::make(K::F, 0, 0), Action::make(K::F, 1, 0), Action::make(K::F, 2, 0)}, {1, 1, 1});
  EXPECT_EQ(render_grid(c.schedule, c.result),
            "t  |0\n"
            "d0 |0F0 1F0 2F0\n"
            "legend: F forward; -- continues, . idle; 1 column = 1 time unit; leading number: chunk on the device\n");
}

TEST(Grid, OverlapOptimizerRecomputeAndCustomKindsHaveCompactLabels) {
  Case c = single_device(1,
                         {Action::overlap(0, 3, 0, 1), Action::make(K::R, 0, 2), Action::custom_op(0, 0, 5),
                          Action::custom_op(1, 0, 5), Action::make(K::Opt, 0)},
                         {3, 1, 1, 2, 1});
  c.schedule.custom_ops = {custom_kind("UNSHARD"), custom_kind("REDUCE", true)};
  // The communicating custom action runs off the compute stream: that time is idle here.
  EXPECT_EQ(render_grid(c.schedule, c.result),
            "t  |0\n"
            "d0 |O3  --- --- R2  UN5 .   .   OPT\n"
            "legend: R recompute, O<m> forward of m overlapped with a backward, OPT optimizer, UN UNSHARD; "
            "-- continues, . idle; 1 column = 1 time unit\n");
}

TEST(Grid, AnEmptyRunDrawsEmptyRows) {
  const Case c = single_device(1, {}, {});
  EXPECT_EQ(render_grid(c.schedule, c.result), "t  |\nd0 |\nlegend: -- continues, . idle; 1 column = 1 time unit\n");
  const std::string svg = render_svg(c.schedule, c.result);
  EXPECT_EQ(check_balanced(svg), "");
  EXPECT_EQ(count(svg, "<rect class=\"background\""), 1u);
  EXPECT_EQ(count(svg, "<rect"), 1u);
}

TEST(Grid, RejectsResultsItCannotDraw) {
  Case c = one_f_one_b();
  try {
    render_grid(c.schedule, c.result, -1);
    FAIL() << "a negative step was accepted";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "grid: the time step must be a positive number (got -1)");
  }
  try {
    render_grid(c.schedule, c.result, 1e-6);
    FAIL() << "ten million columns were accepted";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(),
                 "grid: a step of 1e-06 needs 9000000 columns for a makespan of 9 (at most 1000000); "
                 "choose a larger step");
  }
  c.result.timeline.clear();
  try {
    render_grid(c.schedule, c.result);
    FAIL() << "a result without a timeline was accepted";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(),
                 "grid: the simulation result has a timeline for 0 devices but schedule 'demo' has 2 (was it simulated "
                 "without recording the timeline?)");
  }
  c = one_f_one_b();
  c.result.makespan = std::numeric_limits<double>::quiet_NaN();
  try {
    render_svg(c.schedule, c.result);
    FAIL() << "a makespan of NaN was accepted";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "svg: the simulation result's makespan is nan");
  }
  c = one_f_one_b();
  c.result.timeline[1].pop_back();
  try {
    render_grid(c.schedule, c.result);
    FAIL() << "a timeline of another schedule was accepted";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "grid: device 1 has 8 actions but its simulated timeline has 7");
  }
}

TEST(Order, ListsEveryActionOfEachDevice) {
  const Case c = one_f_one_b();
  EXPECT_EQ(render_order(c.schedule),
            "d0 | 0F0 0SEND_F0 0F1 0SEND_F1 0RECV_B0 0B0 0RECV_B1 0B1\n"
            "d1 | 1RECV_F0 1F0 1B0 1SEND_B0 1RECV_F1 1F1 1B1 1SEND_B1\n");
}

TEST(Order, NamesCustomKindsAndAlignsManyDevices) {
  Schedule s = make_schedule("wide", 11, 1, loop_placement(11, 11));
  s.custom_ops = {custom_kind("UNSHARD", false, false)};
  s.device_actions[0] = {Action::custom_op(0, 0, -1), Action::make(K::F, 0, 0)};
  s.device_actions[10] = {Action::make(K::F, 10, 0)};
  const std::string order = render_order(s);
  EXPECT_EQ(order.substr(0, order.find('\n')), "d0  | 0UNSHARD 0F0");
  EXPECT_NE(order.find("\nd1  |\n"), std::string::npos);
  EXPECT_TRUE(order.ends_with("\nd10 | 10F0\n"));
}

// ---- SVG --------------------------------------------------------------------------------------

TEST(Svg, DrawsABoxPerComputeActionAndAMemoryCurvePerDevice) {
  Case c = one_f_one_b();
  c.schedule.name = "a<b&\"c\"";
  const std::string svg = render_svg(c.schedule, c.result);
  EXPECT_TRUE(svg.starts_with("<svg xmlns=\"http://www.w3.org/2000/svg\" viewBox=\"0 0 "));
  EXPECT_EQ(check_balanced(svg), "");
  EXPECT_EQ(count(svg, "<rect class=\"F\""), 4u);
  EXPECT_EQ(count(svg, "<rect class=\"B\""), 4u);
  EXPECT_EQ(count(svg, "<rect class=\"SEND_F\""), 0u);  // posts take no time: not drawn
  EXPECT_EQ(count(svg, "<line class=\"transfer\""), 4u);
  EXPECT_EQ(count(svg, "<polyline class=\"memory\""), 2u);
  // Four samples make a step curve of 1 + 2 * 3 + 1 points.
  const size_t points = svg.find("points=\"");
  ASSERT_NE(points, std::string::npos);
  const std::string first_curve = svg.substr(points + 8, svg.find('"', points + 8) - points - 8);
  EXPECT_EQ(std::count(first_curve.begin(), first_curve.end(), ','), 8);
  EXPECT_EQ(count(svg, "<line class=\"capacity\""), 1u);  // device 1 is unlimited
  EXPECT_NE(svg.find(">capacity 2</text>"), std::string::npos);
  EXPECT_NE(svg.find(">peak 2</text>"), std::string::npos);
  EXPECT_NE(svg.find(">peak 1</text>"), std::string::npos);
  EXPECT_NE(svg.find(">a&lt;b&amp;&quot;c&quot;: makespan 9, bubble 33.3%, efficiency 66.7%</text>"),
            std::string::npos);
  EXPECT_NE(svg.find("<title>1B0 [2, 4)</title>"), std::string::npos);
  for (const char* legend :
       {">F forward</text>", ">B backward</text>", ">transfer</text>", ">memory</text>", ">capacity</text>"})
    EXPECT_NE(svg.find(legend), std::string::npos) << legend;
  EXPECT_EQ(svg.find(">I input grad</text>"), std::string::npos);  // only kinds that occur
}

TEST(Svg, TimesCarryTheirUnit) {
  const Case c = one_f_one_b();
  const std::string svg = render_svg(c.schedule, c.result, {"ms"});
  EXPECT_NE(svg.find(">demo: makespan 9 ms, bubble 33.3%"), std::string::npos) << svg;
  EXPECT_NE(svg.find(">time (ms)</text>"), std::string::npos) << svg;
  EXPECT_NE(render_svg(c.schedule, c.result).find(">time</text>"), std::string::npos);
}

// "viewBox=\"0 0 W H\"": the drawing's width over its height.
double aspect(const std::string& svg) {
  double width = 0, height = 0;
  std::sscanf(svg.c_str() + svg.find("viewBox=\"0 0 ") + 13, "%lf %lf", &width, &height);
  return width / height;
}

TEST(Svg, AMaximalAspectKeepsATimelineWithTinyActionsReadable) {
  // One action a thousandth of the others' length, as a measured send or optimizer step is.
  Case c = one_f_one_b();
  c.result.timeline[0][0] = {0, 0.001};
  const std::string stretched = render_svg(c.schedule, c.result);
  EXPECT_GT(aspect(stretched), 20);
  const std::string capped = render_svg(c.schedule, c.result, {"ms", 4});
  EXPECT_LE(aspect(capped), 4.01);
  EXPECT_EQ(count(capped, "<rect class=\"F\""), 4u);
}

TEST(Svg, ColoursOverlapCustomAndSecondChunks) {
  Case c = single_device(2,
                         {Action::make(K::F, 0, 0), Action::make(K::F, 1, 0), Action::overlap(0, 1, 1, 0, K::I),
                          Action::custom_op(0, 1, 0), Action::make(K::R, 0, 0), Action::make(K::W, 1, 0)},
                         {1, 1, 3, 1, 1, 1});
  c.schedule.custom_ops = {custom_kind("UNSHARD")};
  const std::string svg = render_svg(c.schedule, c.result);
  EXPECT_EQ(check_balanced(svg), "");
  EXPECT_EQ(count(svg, "<rect class=\"F\""), 2u);
  EXPECT_NE(line_with(svg, "<title>0F0 [0, 1)").find("fill=\"#4c72b0\""), std::string::npos);
  EXPECT_NE(line_with(svg, "<title>1F0 [1, 2)").find("fill=\"#a5b8d7\""), std::string::npos);  // lighter
  EXPECT_NE(line_with(svg, "<title>1W0 [7, 8)").find("fill=\"#aad3b3\""), std::string::npos);
  EXPECT_NE(line_with(svg, "<title>0R0 [6, 7)").find("fill=\"#8172b3\""), std::string::npos);
  EXPECT_EQ(count(svg, "<rect class=\"OVERLAP_F_B\""), 1u);
  EXPECT_NE(svg.find("fill=\"url(#overlap-I-0)\""), std::string::npos);
  EXPECT_NE(svg.find("<linearGradient id=\"overlap-I-0\""), std::string::npos);
  EXPECT_NE(svg.find(">1/0</text>"), std::string::npos);  // both micro-batches of the overlap
  EXPECT_EQ(count(svg, "<rect class=\"custom-UNSHARD\""), 1u);
  EXPECT_EQ(count(svg, "<rect class=\"R\""), 1u);
  EXPECT_EQ(count(svg, "<rect class=\"W\""), 1u);
  EXPECT_NE(svg.find(">second chunk on the device</text>"), std::string::npos);
  EXPECT_EQ(count(svg, "<polyline"), 0u);  // no memory recorded
}

TEST(Svg, HostTransfersAreMarkedUnderTheirDevice) {
  Case c = one_f_one_b();
  c.result.transfers.push_back({1, -1, 1, 2, 5, {4, 6}});
  c.result.transfers.push_back({-1, 1, 1, 6, 5, {6, 7}});
  const std::string svg = render_svg(c.schedule, c.result);
  EXPECT_EQ(check_balanced(svg), "");
  EXPECT_EQ(count(svg, "<line class=\"host-transfer\""), 2u);
  EXPECT_EQ(count(svg, "<line class=\"transfer\""), 4u);
}

// ---- trace ------------------------------------------------------------------------------------

std::vector<json> events_where(const json& trace, const std::string& key, const std::string& value) {
  std::vector<json> out;
  for (const json& e : trace["traceEvents"])
    if (e.value(key, "") == value) out.push_back(e);
  return out;
}

TEST(Trace, HasAProcessPerDeviceComputeAndCommunicationSlicesAndMemoryCounters) {
  const Case c = one_f_one_b();
  const json trace = json::parse(render_trace(c.schedule, c.result));
  EXPECT_EQ(trace["displayTimeUnit"], "ms");
  EXPECT_EQ(trace["otherData"]["schedule"], "demo");
  const auto names = events_where(trace, "name", "process_name");
  ASSERT_EQ(names.size(), 2u);
  EXPECT_EQ(names[0]["args"]["name"], "device 0");
  EXPECT_EQ(names[0]["pid"], 1);  // Perfetto reserves pid 0
  EXPECT_EQ(names[1]["pid"], 2);
  const auto compute = events_where(trace, "cat", "computation");
  const auto comm = events_where(trace, "cat", "communication");
  ASSERT_EQ(compute.size(), 8u);
  ASSERT_EQ(comm.size(), 4u);
  EXPECT_EQ(events_where(trace, "ph", "C").size(), 8u);
  EXPECT_EQ(events_where(trace, "ph", "X").size(), 12u);

  const json& b0 = compute[2];  // device 0: F0 F1 B0 B1
  EXPECT_EQ(b0["name"], "0B0");
  EXPECT_EQ(b0["ph"], "X");
  EXPECT_EQ(b0["pid"], 1);
  EXPECT_EQ(b0["tid"], 10);
  EXPECT_EQ(b0["ts"], 4000.0);
  EXPECT_EQ(b0["dur"], 2000.0);
  EXPECT_EQ(b0["args"], json({{"stage", 0}, {"microbatch", 0}}));

  const json& send = comm[2];
  EXPECT_EQ(send["name"], "1SEND_B0");
  EXPECT_EQ(send["pid"], 2);
  EXPECT_EQ(send["tid"], 24);  // device 1's link to device 0
  EXPECT_EQ(send["args"], json({{"src", 1}, {"dst", 0}, {"bytes", 1.0}, {"stage", 1}, {"microbatch", 0}}));
  bool named = false;
  for (const json& e : events_where(trace, "name", "thread_name"))
    if (e["pid"] == 2 && e["tid"] == 24) named = e["args"]["name"] == "send to device 0";
  EXPECT_TRUE(named);

  const json counter = events_where(trace, "ph", "C")[1];
  EXPECT_EQ(counter["pid"], 1);
  EXPECT_EQ(counter["ts"], 1000.0);
  EXPECT_EQ(counter["args"]["memory"], 2.0);
}

TEST(Trace, TimeUnitsConvertToMicroseconds) {
  const Case c = one_f_one_b();
  for (auto [unit, scale] : std::vector<std::pair<std::string, double>>{{"s", 1e6},
                                                                        {"ms", 1e3},
                                                                        {"us", 1},
                                                                        {"ns", 1e-3},
                                                                        {"unit", 1e3},
                                                                        {"cycles", 1e3}}) {
    const json trace = json::parse(render_trace(c.schedule, c.result, unit));
    const auto compute = events_where(trace, "cat", "computation");
    EXPECT_DOUBLE_EQ(compute[7]["ts"].get<double>(), 5 * scale) << unit;  // device 1's B1
    EXPECT_DOUBLE_EQ(compute[7]["dur"].get<double>(), 2 * scale) << unit;
  }
}

TEST(Trace, ThreadIdsAreNonZeroAndBelongToOneProcess) {
  const Case c = one_f_one_b();
  const json trace = json::parse(render_trace(c.schedule, c.result));
  std::map<int64_t, int64_t> process_of_thread;
  for (const json& e : trace["traceEvents"]) {
    EXPECT_GT(e["pid"].get<int64_t>(), 0) << e.dump();
    if (!e.contains("tid")) continue;  // counters belong to the process
    const int64_t tid = e["tid"], pid = e["pid"];
    EXPECT_GT(tid, 0) << e.dump();
    const auto [it, inserted] = process_of_thread.emplace(tid, pid);
    EXPECT_EQ(it->second, pid) << "tid " << tid << " in two processes";
  }
  EXPECT_EQ(process_of_thread.size(), 4u);  // two compute threads, two links
}

TEST(Trace, TimesAreRoundedToNanoseconds) {
  Case c = single_device(1, {Action::make(K::F, 0, 0), Action::make(K::F, 0, 1)}, {0.1, 0.2});
  ASSERT_NE(c.result.timeline[0][1].end, 0.3);  // 0.1 + 0.2 is not 0.3 in binary
  const json trace = json::parse(render_trace(c.schedule, c.result, "s"));
  const auto compute = events_where(trace, "cat", "computation");
  EXPECT_EQ(compute[1]["ts"], 100000.0);
  EXPECT_EQ(compute[1]["dur"], 200000.0);
}

TEST(Trace, SlicesOnOneThreadNeverOverlap) {
  Case c = one_f_one_b();
  // Two transfers out of device 0 at once, on different links, and an overlap action with its args.
  c.schedule = make_schedule("fan", 3, 1, {0, 1, 2});
  c.schedule.device_actions[0] = {Action::overlap(0, 1, 0, 0), Action::make(K::SendF, 0, 1),
                                  Action::make(K::Offload, 0, 0)};
  c.result.timeline = {{{0, 3}, {3, 3}, {3, 3}}, {}, {}};
  c.result.transfers = {{0, 1, 0, 1, 8, {3, 5}}, {0, 2, 0, 1, 8, {3, 6}}, {0, -1, 0, 2, 8, {3, 4}}};
  c.result.devices.assign(3, DeviceReport{});
  const json trace = json::parse(render_trace(c.schedule, c.result));
  std::map<std::pair<int, int>, std::vector<std::pair<double, double>>> threads;
  for (const json& e : events_where(trace, "ph", "X"))
    threads[{e["pid"], e["tid"]}].push_back({e["ts"], e["ts"].get<double>() + e["dur"].get<double>()});
  EXPECT_EQ(threads.size(), 4u);  // compute, to device 1, to device 2, to host
  for (auto& [thread, slices] : threads) {
    std::sort(slices.begin(), slices.end());
    for (size_t i = 1; i < slices.size(); ++i) EXPECT_LE(slices[i - 1].second, slices[i].first);
  }
  const json overlap = events_where(trace, "cat", "computation").at(0);
  EXPECT_EQ(overlap["name"], "(0F1;0B0)OVERLAP_F_B");
  EXPECT_EQ(overlap["args"],
            json({{"stage", 0}, {"microbatch", 1}, {"backward_stage", 0}, {"backward_microbatch", 0}}));
}

// ---- report -----------------------------------------------------------------------------------

CostTable units(const char* time, const char* memory) {
  CostTable costs;
  costs.time_unit = time;
  costs.memory_unit = memory;
  return costs;
}

TEST(Report, JsonCarriesEveryFieldWithUnlimitedCapacityAsNull) {
  const Case c = one_f_one_b();
  const json report = report_json(c.schedule, units("ms", "GB"), c.result);
  const json expected = {{"schedule", "demo"},
                         {"devices_count", 2},
                         {"microbatches", 2},
                         {"stages", 2},
                         {"makespan", 9.0},
                         {"bubble_ratio", 6.0 / 18},
                         {"lower_bound", 6.0},
                         {"efficiency", 6.0 / 9},
                         {"comm_bytes", 4.0},
                         {"comm_transfers", 4},
                         {"fits", true},
                         {"time_unit", "ms"},
                         {"memory_unit", "GB"},
                         {"devices",
                          {{{"device", 0},
                            {"busy", 6.0},
                            {"idle", 3.0},
                            {"peak_memory", 2.0},
                            {"peak_time", 1.0},
                            {"static_memory", 0.0},
                            {"capacity", 2.0},
                            {"fits", true}},
                           {{"device", 1},
                            {"busy", 6.0},
                            {"idle", 3.0},
                            {"peak_memory", 1.0},
                            {"peak_time", 1.0},
                            {"static_memory", 0.0},
                            {"capacity", nullptr},
                            {"fits", true}}}}};
  EXPECT_EQ(report, expected) << report.dump(2);
}

TEST(Report, TextIsAnAlignedTableWithASummary) {
  Case c = one_f_one_b();
  EXPECT_EQ(render_report(c.schedule, units("ms", "GB"), c.result),
            "schedule demo: 2 devices, 2 micro-batches, 2 stages (time in ms, memory in GB)\n"
            "makespan 9 ms, bubble 33.3%, lower bound 6 ms, efficiency 66.7%\n"
            "communication 4 transfers, volume 4; memory fits\n"
            "device  busy  idle  peak memory  peak time  static memory  capacity  fits\n"
            "d0      6 ms  3 ms            2       1 ms              0         2   yes\n"
            "d1      6 ms  3 ms            1       1 ms              0         -   yes\n");
  c.result.fits = false;
  c.result.devices[0].fits = false;
  c.result.devices[0].peak_memory = 2.5;
  c.result.devices[0].static_memory = 0.5;
  const std::string text = render_report(c.schedule, units("unit", "unit"), c.result);
  EXPECT_NE(text.find("; memory does not fit on device 0\n"), std::string::npos) << text;
  EXPECT_NE(text.find("d0         6     3          2.5          1            0.5         2    no\n"), std::string::npos)
      << text;
  c.result.devices[1].fits = false;
  EXPECT_NE(render_report(c.schedule, units("unit", "unit"), c.result).find("does not fit on devices 0, 1\n"),
            std::string::npos);
}

TEST(Report, BytesPrintWithUnitsInTheStyleTheLimitWasWrittenIn) {
  Case c = one_f_one_b();
  c.result.devices[0].peak_memory = 18.1e9;
  c.result.devices[0].capacity = 80.0 * 1024 * 1024 * 1024;
  const std::string decimal = render_report(c.schedule, units("ms", "bytes"), c.result);
  EXPECT_NE(decimal.find("d0      6 ms  3 ms     18.10 GB       1 ms            0 B  85.90 GB   yes\n"),
            std::string::npos)
      << decimal;
  const std::string binary = render_report(c.schedule, units("ms", "bytes"), c.result, ByteUnits::Binary);
  EXPECT_NE(binary.find("d0      6 ms  3 ms    16.86 GiB       1 ms            0 B  80.00 GiB   yes\n"),
            std::string::npos)
      << binary;
}

TEST(Report, RejectsAResultOfAnotherShape) {
  Case c = one_f_one_b();
  c.result.devices.pop_back();
  EXPECT_THROW(report_json(c.schedule, CostTable{}, c.result), Error);
  try {
    render_report(c.schedule, CostTable{}, c.result);
    FAIL();
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "report: the simulation result reports 1 devices but schedule 'demo' has 2");
  }
}

// ---- end to end -------------------------------------------------------------------------------

TEST(Views, DrawWhatTheSimulatorComputes) {
  Schedule schedule = make_schedule("1f1b by hand", 2, 2, {0, 1});
  schedule.device_actions[0] = {Action::make(K::F, 0, 0), Action::make(K::F, 0, 1), Action::make(K::B, 0, 0),
                                Action::make(K::B, 0, 1)};
  schedule.device_actions[1] = {Action::make(K::F, 1, 0), Action::make(K::B, 1, 0), Action::make(K::F, 1, 1),
                                Action::make(K::B, 1, 1)};
  const Schedule lowered = lower(schedule);
  const CostTable costs = uniform_costs(2, 1, 1, 1);  // F = 1, B = 2, free transfers
  const SimResult result = simulate(lowered, costs);
  EXPECT_EQ(render_grid(lowered, result),
            "t  |0\n"
            "d0 |F0 F1 .  .  B0 -- .  B1 --\n"
            "d1 |.  F0 B0 -- F1 B1 -- .  .\n"
            "legend: F forward, B backward; -- continues, . idle; 1 column = 1 time unit\n");
  EXPECT_EQ(render_report(lowered, costs, result),
            "schedule 1f1b by hand: 2 devices, 2 micro-batches, 2 stages (time in unit, memory in unit)\n"
            "makespan 9, bubble 33.3%, lower bound 6, efficiency 66.7%\n"
            "communication 4 transfers, volume 0; memory fits\n"
            "device  busy  idle  peak memory  peak time  static memory  capacity  fits\n"
            "d0         6     3            2          1              0         -   yes\n"
            "d1         6     3            1          1              0         -   yes\n");
  const std::string svg = render_svg(lowered, result);
  EXPECT_EQ(check_balanced(svg), "");
  EXPECT_EQ(count(svg, "<rect class=\"B\""), 4u);
  const json trace = json::parse(render_trace(lowered, result));
  EXPECT_EQ(events_where(trace, "cat", "computation").size(), 8u);
  EXPECT_EQ(events_where(trace, "cat", "communication").size(), 4u);
}

// ---- scale ------------------------------------------------------------------------------------

TEST(Views, DrawEveryActionOfALongSchedule) {
  constexpr int kDevices = 4, kPerDevice = 5'000;
  Case c;
  c.schedule = make_schedule("long", kDevices, kPerDevice, loop_placement(kDevices, kDevices));
  c.result.timeline.assign(kDevices, {});
  c.result.devices.assign(kDevices, DeviceReport{});
  for (int d = 0; d < kDevices; ++d)
    for (int m = 0; m < kPerDevice; ++m) {
      c.schedule.device_actions[d].push_back(Action::make(K::F, d, m));
      c.result.timeline[d].push_back({double(d + m), double(d + m + 1)});
      c.result.devices[d].memory.push_back({double(d + m), double(m)});
    }
  c.result.makespan = kDevices - 1 + kPerDevice;
  const std::string svg = render_svg(c.schedule, c.result);
  EXPECT_EQ(count(svg, "<rect class=\"F\""), size_t(kDevices) * kPerDevice);
  const json trace = json::parse(render_trace(c.schedule, c.result));
  EXPECT_EQ(events_where(trace, "ph", "X").size(), size_t(kDevices) * kPerDevice);
  EXPECT_EQ(events_where(trace, "ph", "C").size(), size_t(kDevices) * kPerDevice);
  const std::string grid = render_grid(c.schedule, c.result);
  EXPECT_EQ(count(grid, "F4999 "), size_t(kDevices - 1));  // the last device's ends its row
}

}  // namespace
}  // namespace flexpipe
