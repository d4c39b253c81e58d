// add_memory_actions: R before the backward, OFFLOAD after the forward, RELOAD one compute action
// ahead, on the built-in library in both forms; what the validator, lowering and the simulator make
// of the result.
#include "flexpipe/ir/memory_actions.h"

#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "flexpipe/costs/cost_table.h"
#include "flexpipe/ir/lowering.h"
#include "flexpipe/schedules/builtin.h"
#include "flexpipe/sim/simulator.h"
#include "flexpipe/support/error.h"
#include "flexpipe/validate/validator.h"
#include "schedule_test_helpers.h"

namespace flexpipe {
namespace {

using test::row;

int count(const Schedule& schedule, ActionKind kind) {
  int n = 0;
  for (const auto& list : schedule.device_actions)
    for (const Action& a : list) n += a.kind == kind;
  return n;
}

// Micro-batches that run on the flagged stages: the number of actions the pass inserts per kind.
int flagged_pairs(const Schedule& schedule, const std::vector<char>& flags) {
  int n = 0;
  for (int s = 0; s < schedule.num_stages(); ++s)
    for (int m = 0; m < schedule.num_microbatches; ++m)
      n += flags[s] && schedule.pipeline_of_microbatch(m) == schedule.pipeline_of_stage(s);
  return n;
}

bool computes(const Schedule& schedule, const Action& a) {
  return a.kind == ActionKind::Custom ? !schedule.custom_ops[a.custom].communicates : is_compute(a.kind);
}

// Where (stage, micro-batch) has an action of `kind` in `list` (an Overlap counts as F and as its
// backward half's kind); -1 when absent.
int find(const std::vector<Action>& list, ActionKind kind, int stage, int microbatch) {
  for (int i = 0; i < static_cast<int>(list.size()); ++i) {
    const Action& a = list[i];
    if (a.kind == ActionKind::Overlap) {
      if (kind == ActionKind::F && a.stage == stage && a.microbatch == microbatch) return i;
      if (is_backward(kind) && a.stage2 == stage && a.microbatch2 == microbatch) return i;
    }
    if (a.kind == kind && a.stage == stage && a.microbatch == microbatch) return i;
  }
  return -1;
}

int backward_of(const std::vector<Action>& list, int stage, int microbatch) {
  const int b = find(list, ActionKind::B, stage, microbatch);
  return b >= 0 ? b : find(list, ActionKind::I, stage, microbatch);
}

// The position rules, checked on every inserted action of `result`.
void expect_positions(const Schedule& result, const std::vector<char>& recompute, const std::vector<char>& offload) {
  for (int d = 0; d < result.num_devices; ++d) {
    const auto& list = result.device_actions[d];
    for (int i = 0; i < static_cast<int>(list.size()); ++i) {
      const Action& a = list[i];
      const int s = a.stage, m = a.microbatch;
      const std::string where = "device " + std::to_string(d) + " #" + std::to_string(i) + " " + result.action_name(a);
      if (a.kind == ActionKind::R && recompute[s]) {
        EXPECT_EQ(backward_of(list, s, m), i + 1) << where << ": R right before the backward";
      } else if (a.kind == ActionKind::Offload && offload[s]) {
        EXPECT_EQ(find(list, ActionKind::F, s, m), i - 1) << where << ": OFFLOAD right after the forward";
      } else if (a.kind == ActionKind::Reload && offload[s]) {
        const int off = find(list, ActionKind::Offload, s, m);
        const int r = find(list, ActionKind::R, s, m);
        const int anchor = r >= 0 ? r : backward_of(list, s, m);
        ASSERT_GE(off, 0) << where;
        ASSERT_GT(anchor, i) << where;
        int expected = anchor;
        for (int j = anchor - 1; j > off; --j)
          if (computes(result, list[j])) {
            expected = j;
            break;
          }
        // ... or before that action's R, which stays right before its backward.
        if (expected < anchor && expected - 1 > off && list[expected - 1].kind == ActionKind::R &&
            backward_of(list, list[expected - 1].stage, list[expected - 1].microbatch) == expected)
          --expected;
        int next = i + 1;
        while (list[next].kind == ActionKind::Reload) ++next;  // RELOADs for other micro-batches
        EXPECT_EQ(next, expected) << where << ": RELOAD one compute action ahead of "
                                  << result.action_name(list[anchor]);
        EXPECT_GT(i, off) << where;
      }
    }
  }
}

CostTable costs_for(const Schedule& schedule) {
  CostTable costs = uniform_costs(schedule.stages_per_pipeline, 1, 1, 1, 0.25);
  for (StageCosts& stage : costs.stages) {
    stage.activation_bytes = 4;
    stage.checkpoint_bytes = 1;
    stage.offload_bytes = 2;
  }
  costs.host_link = Link{0.1, 10};
  return costs;
}

struct Case {
  std::string name;
  ScheduleParams params;
  std::vector<char> recompute, offload;
};

std::vector<Case> library_cases() {
  return {
      {"1f1b", {4, 8, 0}, {1, 0, 1, 0}, {1, 1, 0, 0}},
      {"gpipe", {3, 4, 0}, {1, 1, 0}, {0, 1, 1}},
      {"zb-h1", {4, 8, 0}, {0, 1, 1, 0}, {1, 0, 1, 0}},
      {"interleaved-1f1b", {2, 4, 2}, {1, 0, 0, 1}, {0, 1, 1, 0}},
      {"dualpipe", {4, 8, 0}, {1, 0, 0, 1, 0, 1, 1, 0}, {0, 1, 1, 0, 1, 1, 0, 0}},
  };
}

TEST(MemoryActions, LibrarySchedulesStayValidInBothForms) {
  for (const Case& c : library_cases()) {
    SCOPED_TRACE(c.name);
    const Schedule plain = make_builtin(c.name, c.params);
    ASSERT_EQ(static_cast<int>(c.recompute.size()), plain.num_stages());
    const int recomputed = flagged_pairs(plain, c.recompute), offloaded = flagged_pairs(plain, c.offload);
    ASSERT_GT(recomputed, 0);
    ASSERT_GT(offloaded, 0);

    const Schedule compute_only = add_memory_actions(plain, c.recompute, c.offload);
    EXPECT_TRUE(validate(compute_only).empty()) << validate(compute_only).front().to_string();
    EXPECT_EQ(count(compute_only, ActionKind::R), recomputed);
    EXPECT_EQ(count(compute_only, ActionKind::Offload), offloaded);
    EXPECT_EQ(count(compute_only, ActionKind::Reload), offloaded);
    EXPECT_EQ(compute_only.num_actions(), plain.num_actions() + recomputed + 2 * offloaded);
    expect_positions(compute_only, c.recompute, c.offload);

    // On the lowered schedule: the same actions, SEND/RECV left where they are.
    const Schedule lowered = add_memory_actions(lower(plain), c.recompute, c.offload);
    EXPECT_TRUE(validate(lowered).empty()) << validate(lowered).front().to_string();
    EXPECT_EQ(lowered.num_actions(), lower(plain).num_actions() + recomputed + 2 * offloaded);
    expect_positions(lowered, c.recompute, c.offload);
    EXPECT_EQ(strip_communication(lowered), compute_only);

    // Lowering the result still works, and both simulate.
    const Schedule relowered = lower(compute_only);
    EXPECT_TRUE(validate(relowered).empty());
    const SimResult a = simulate(relowered, costs_for(plain));
    const SimResult b = simulate(lowered, costs_for(plain));
    EXPECT_GT(a.makespan, 0);
    EXPECT_GT(b.makespan, 0);
    int host_moves = 0;
    for (const Transfer& t : b.transfers) host_moves += t.src == -1 || t.dst == -1;
    EXPECT_EQ(host_moves, 2 * offloaded);

    // Pairs that already have their actions are left alone: a second pass changes nothing.
    EXPECT_EQ(add_memory_actions(compute_only, c.recompute, c.offload), compute_only);
    EXPECT_EQ(add_memory_actions(lowered, c.recompute, c.offload), lowered);
  }
}

TEST(MemoryActions, OneFOneBByHand) {
  // 1F1B on 2 devices, 4 micro-batches. Device 0: F0 F1 B0 F2 B1 F3 B2 B3; device 1: F0 B0 F1 B1 ...
  const Schedule plain = make_builtin("1f1b", {2, 4, 0});
  const Schedule recompute = add_memory_actions(plain, {1, 0}, {0, 0});
  EXPECT_EQ(row(recompute, 0), "0F0 0F1 0R0 0B0 0F2 0R1 0B1 0F3 0R2 0B2 0R3 0B3");
  EXPECT_EQ(row(recompute, 1), row(plain, 1));

  // RELOAD(m) goes before the compute action preceding B(m): F(m+1), and B2 for the last one.
  const Schedule offload = add_memory_actions(plain, {0, 0}, {1, 0});
  EXPECT_EQ(row(offload, 0),
            "0F0 0OFFLOAD0 0RELOAD0 0F1 0OFFLOAD1 0B0 0RELOAD1 0F2 0OFFLOAD2 0B1 0RELOAD2 0F3 0OFFLOAD3 0RELOAD3 0B2 "
            "0B3");

  // Both: the RELOAD serves the R, one compute action ahead of it. RELOAD3 goes before B2, the
  // compute action before R3, and so before R2, which stays right before B2.
  const Schedule both = add_memory_actions(plain, {1, 0}, {1, 0});
  EXPECT_EQ(row(both, 0),
            "0F0 0OFFLOAD0 0RELOAD0 0F1 0OFFLOAD1 0R0 0B0 0RELOAD1 0F2 0OFFLOAD2 0R1 0B1 0RELOAD2 0F3 0OFFLOAD3 "
            "0RELOAD3 0R2 0B2 0R3 0B3");

  // Checkpoint offload reloads right before each R: only the micro-batch being rebuilt is back.
  const Schedule late = add_memory_actions(plain, {1, 0}, {1, 0}, {1, 0});
  EXPECT_EQ(
      row(late, 0),
      "0F0 0OFFLOAD0 0F1 0OFFLOAD1 0RELOAD0 0R0 0B0 0F2 0OFFLOAD2 0RELOAD1 0R1 0B1 0F3 0OFFLOAD3 0RELOAD2 0R2 0B2 "
      "0RELOAD3 0R3 0B3");
  EXPECT_TRUE(validate(late).empty());

  // The last stage runs B(m) right after F(m): no compute action between the OFFLOAD and the
  // backward, so the RELOAD goes right before the backward.
  const Schedule last = add_memory_actions(plain, {0, 0}, {0, 1});
  EXPECT_EQ(
      row(last, 1),
      "1F0 1OFFLOAD0 1RELOAD0 1B0 1F1 1OFFLOAD1 1RELOAD1 1B1 1F2 1OFFLOAD2 1RELOAD2 1B2 1F3 1OFFLOAD3 1RELOAD3 1B3");

  // Lowered: R between RECV_B and B, OFFLOAD between F and SEND_F.
  const Schedule lowered = add_memory_actions(lower(plain), {1, 0}, {1, 0});
  EXPECT_EQ(row(lowered, 0),
            "0F0 0OFFLOAD0 0SEND_F0 0RELOAD0 0F1 0OFFLOAD1 0SEND_F1 0RECV_B0 0R0 0B0 0RELOAD1 0F2 0OFFLOAD2 0SEND_F2 "
            "0RECV_B1 0R1 0B1 0RELOAD2 0F3 0OFFLOAD3 0SEND_F3 0RECV_B2 0RELOAD3 0R2 0B2 0RECV_B3 0R3 0B3");
  EXPECT_TRUE(validate(lowered).empty());
}

TEST(MemoryActions, SplitBackwardAndOverlapHalves) {
  // ZB-H1: R goes before I (W is left alone).
  const Schedule zb = add_memory_actions(make_builtin("zb-h1", {2, 4, 0}), {1, 1}, {0, 0});
  for (const auto& list : zb.device_actions)
    for (size_t i = 0; i + 1 < list.size(); ++i)
      if (list[i].kind == ActionKind::R) {
        EXPECT_EQ(list[i + 1].kind, ActionKind::I);
        EXPECT_EQ(list[i + 1].microbatch, list[i].microbatch);
      }
  // DualPipe: OVERLAP_F_B units take an R before them for their backward half and an OFFLOAD after
  // them for their forward half.
  const Schedule plain = make_builtin("dualpipe", {4, 8, 0});
  std::vector<char> all(plain.num_stages(), 1);
  const Schedule dual = add_memory_actions(plain, all, all);
  int overlaps = 0;
  for (const auto& list : dual.device_actions)
    for (size_t i = 1; i + 1 < list.size(); ++i) {
      const Action& a = list[i];
      if (a.kind != ActionKind::Overlap) continue;
      ++overlaps;
      EXPECT_EQ(list[i - 1], Action::make(ActionKind::R, a.stage2, a.microbatch2));
      EXPECT_EQ(list[i + 1], Action::make(ActionKind::Offload, a.stage, a.microbatch));
    }
  EXPECT_GT(overlaps, 0);
  EXPECT_TRUE(validate(dual).empty());
  EXPECT_NO_THROW(simulate(lower(dual), costs_for(plain)));
}

TEST(MemoryActions, ExistingActionsAreKept) {
  // 1F1B with R on micro-batch 1 and OFFLOAD/RELOAD on micro-batch 0 already: neither gets another.
  Schedule plain = make_builtin("1f1b", {2, 2, 0});
  auto& list = plain.device_actions[0];  // 0F0 0F1 0B0 0B1
  list = {Action::make(ActionKind::F, 0, 0), Action::make(ActionKind::Offload, 0, 0),
          Action::make(ActionKind::F, 0, 1), Action::make(ActionKind::Reload, 0, 0),
          Action::make(ActionKind::B, 0, 0), Action::make(ActionKind::R, 0, 1),
          Action::make(ActionKind::B, 0, 1)};
  ASSERT_TRUE(validate(plain).empty());
  const Schedule result = add_memory_actions(plain, {1, 0}, {1, 0});
  EXPECT_EQ(row(result, 0), "0F0 0OFFLOAD0 0F1 0OFFLOAD1 0RELOAD0 0RELOAD1 0R0 0B0 0R1 0B1");
  EXPECT_TRUE(validate(result).empty());
}

TEST(MemoryActions, ErrorsNameTheProblem) {
  const Schedule plain = make_builtin("1f1b", {2, 4, 0});
  try {
    add_memory_actions(plain, {1}, {0, 0});
    FAIL();
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(),
                 "add_memory_actions: 1 recompute flags for the 2 stages of schedule 1f1b (one per global stage)");
  }
  try {
    add_memory_actions(plain, {0, 0}, {0, 0, 0});
    FAIL();
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(),
                 "add_memory_actions: 3 offload flags for the 2 stages of schedule 1f1b (one per global stage)");
  }
  try {
    add_memory_actions(plain, {0, 0}, {0, 0}, {1});
    FAIL();
  } catch (const Error& e) {
    EXPECT_STREQ(
        e.what(),
        "add_memory_actions: 1 reload-before-recompute flags for the 2 stages of schedule 1f1b (one per global stage)");
  }
  Schedule broken = plain;
  broken.device_actions[1].pop_back();  // 1B3
  try {
    add_memory_actions(broken, {0, 1}, {0, 0});
    FAIL();
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "add_memory_actions: device 1: stage 1 micro-batch 3 has a forward but no backward");
  }
  EXPECT_EQ(add_memory_actions(plain, {0, 0}, {0, 0}), plain);
}

}  // namespace
}  // namespace flexpipe
