// Tests of lowering: where SENDs and RECVs go, split backwards, V placements' local turns.
#include "flexpipe/ir/lowering.h"

#include <gtest/gtest.h>

namespace flexpipe {
namespace {

std::vector<std::string> cells(const Schedule& s, int device) {
  std::vector<std::string> out;
  for (const Action& a : s.device_actions[device]) out.push_back(s.action_name(a));
  return out;
}

// Two stages on two devices, one micro-batch: F0 F1 B1 B0.
Schedule two_device_chain() {
  Schedule s = make_schedule("chain", 2, 1, loop_placement(2, 2));
  s.device_actions[0] = {Action::make(ActionKind::F, 0, 0), Action::make(ActionKind::B, 0, 0)};
  s.device_actions[1] = {Action::make(ActionKind::F, 1, 0), Action::make(ActionKind::B, 1, 0)};
  return s;
}

TEST(Lowering, InsertsSendAfterProducerAndRecvBeforeConsumer) {
  Schedule lowered = lower(two_device_chain());
  EXPECT_EQ(cells(lowered, 0), (std::vector<std::string>{"0F0", "0SEND_F0", "0RECV_B0", "0B0"}));
  EXPECT_EQ(cells(lowered, 1), (std::vector<std::string>{"1RECV_F0", "1F0", "1B0", "1SEND_B0"}));
  EXPECT_TRUE(lowered.has_communication());
}

TEST(Lowering, SplitBackwardSendsAfterInputGradientOnly) {
  Schedule s = make_schedule("split", 2, 1, loop_placement(2, 2));
  s.device_actions[0] = {Action::make(ActionKind::F, 0, 0), Action::make(ActionKind::I, 0, 0),
                         Action::make(ActionKind::W, 0, 0)};
  s.device_actions[1] = {Action::make(ActionKind::F, 1, 0), Action::make(ActionKind::I, 1, 0),
                         Action::make(ActionKind::W, 1, 0)};
  Schedule lowered = lower(s);
  EXPECT_EQ(cells(lowered, 0), (std::vector<std::string>{"0F0", "0SEND_F0", "0RECV_B0", "0I0", "0W0"}));
  EXPECT_EQ(cells(lowered, 1), (std::vector<std::string>{"1RECV_F0", "1F0", "1I0", "1SEND_B0", "1W0"}));
}

TEST(Lowering, VPlacementTurnStaysLocal) {
  // 2 devices, 4 stages in a V: device 0 holds stages 0 and 3, device 1 holds 1 and 2.
  Schedule s = make_schedule("v", 2, 1, v_placement(2, 4));
  using K = ActionKind;
  s.device_actions[0] = {Action::make(K::F, 0, 0), Action::make(K::F, 3, 0), Action::make(K::B, 3, 0),
                         Action::make(K::B, 0, 0)};
  s.device_actions[1] = {Action::make(K::F, 1, 0), Action::make(K::F, 2, 0), Action::make(K::B, 2, 0),
                         Action::make(K::B, 1, 0)};
  Schedule lowered = lower(s);
  EXPECT_EQ(cells(lowered, 1),
            (std::vector<std::string>{"1RECV_F0", "1F0", "2F0", "2SEND_F0", "2RECV_B0", "2B0", "1B0", "1SEND_B0"}));
  EXPECT_EQ(cells(lowered, 0),
            (std::vector<std::string>{"0F0", "0SEND_F0", "3RECV_F0", "3F0", "3B0", "3SEND_B0", "0RECV_B0", "0B0"}));
}

TEST(Lowering, OverlapGetsReceivesOfBothHalvesBeforeAndSendsAfter) {
  Schedule s = make_schedule("overlap", 3, 2, loop_placement(3, 3));
  Action pair = Action::overlap(1, 1, 1, 0);
  s.device_actions[1] = {pair};
  Schedule lowered = lower(s);
  EXPECT_EQ(cells(lowered, 1),
            (std::vector<std::string>{"1RECV_F1", "1RECV_B0", "(1F1;1B0)OVERLAP_F_B", "1SEND_F1", "1SEND_B0"}));
}

TEST(Lowering, IsIdempotentAndStripRestoresComputeOnlyForm) {
  Schedule s = two_device_chain();
  Schedule once = lower(s);
  EXPECT_EQ(lower(once), once);
  EXPECT_EQ(strip_communication(once), s);
  EXPECT_FALSE(strip_communication(once).has_communication());
}

TEST(Lowering, SingleDeviceNeedsNoCommunication) {
  Schedule s = make_schedule("local", 1, 1, loop_placement(1, 2));
  s.device_actions[0] = {Action::make(ActionKind::F, 0, 0), Action::make(ActionKind::F, 1, 0),
                         Action::make(ActionKind::B, 1, 0), Action::make(ActionKind::B, 0, 0)};
  EXPECT_EQ(lower(s), s);
}

TEST(Lowering, BidirectionalPipelinesUseTheirOwnStageChains) {
  // DualPipe-style: pipeline 1's stage 2 (chunk 0) lives on device 1, stage 3 (chunk 1) on device 0.
  Schedule s = make_schedule("bidi", 2, 2, bidirectional_placement(2), 2);
  s.microbatch_pipeline = {0, 1};
  s.device_actions[1] = {Action::make(ActionKind::F, 2, 1)};
  s.device_actions[0] = {Action::make(ActionKind::F, 3, 1)};
  Schedule lowered = lower(s);
  EXPECT_EQ(cells(lowered, 1), (std::vector<std::string>{"2F1", "2SEND_F1"}));
  EXPECT_EQ(cells(lowered, 0), (std::vector<std::string>{"3RECV_F1", "3F1"}));
}

}  // namespace
}  // namespace flexpipe
