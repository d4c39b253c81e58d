// Tests of the PyTorch schedule CSV reader and writer against fixtures and round trips.
#include "flexpipe/interop/pytorch_csv.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "flexpipe/interop/schedule_io.h"
#include "flexpipe/ir/lowering.h"
#include "flexpipe/schedules/builtin.h"
#include "flexpipe/support/error.h"
#include "flexpipe/support/files.h"
#include "flexpipe/validate/validator.h"

namespace flexpipe {
namespace {

const std::string kData = std::string(FLEXPIPE_TEST_DATA) + "/pytorch/";

std::vector<std::string> cells(const Schedule& s, int device) {
  std::vector<std::string> out;
  for (const Action& a : s.device_actions[device]) out.push_back(s.action_name(a));
  return out;
}

std::string error_of(const std::string& text, CsvLettering lettering = CsvLettering::Detect) {
  try {
    parse_pytorch_csv(text, "s.csv", {lettering});
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

std::string write_error_of(const Schedule& s) {
  try {
    write_pytorch_csv(s);
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

Schedule parse_named(const std::string& text, const std::string& name) {
  Schedule s = parse_pytorch_csv(text, name + ".csv");
  EXPECT_EQ(s.name, name);
  return s;
}

int count_kind(const Schedule& s, ActionKind kind) {
  int n = 0;
  for (const auto& list : s.device_actions)
    for (const Action& a : list) n += a.kind == kind;
  return n;
}

// ---- our fixtures in PyTorch's _dump_csv format (tests/data/pytorch/README.md) -------------------

TEST(PytorchCsvFixtures, LoopPlacementComputeOnly) {
  Schedule s = load_pytorch_csv(kData + "loop_zb_2rank_4stage_compute.csv");
  EXPECT_EQ(s.name, "loop_zb_2rank_4stage_compute");
  EXPECT_EQ(s.num_devices, 2);
  EXPECT_EQ(s.num_stages(), 4);
  EXPECT_EQ(s.num_pipelines, 1);
  EXPECT_EQ(s.stage_device, loop_placement(2, 4));
  EXPECT_EQ(s.num_microbatches, 4);
  EXPECT_FALSE(s.has_communication());
  EXPECT_TRUE(s.custom_ops.empty());
  // The empty cells (idle slots) are dropped: 24 actions per rank = 2 stages x 4 micro-batches x F, I, W.
  ASSERT_EQ(s.device_actions[0].size(), 24u);
  ASSERT_EQ(s.device_actions[1].size(), 24u);
  const std::vector<std::string> row0 = cells(s, 0);
  EXPECT_EQ(std::vector<std::string>(row0.begin(), row0.begin() + 6),
            (std::vector<std::string>{"0F0", "0F1", "2F0", "2F1", "2I0", "2W0"}));
  EXPECT_EQ(s.device_actions[1][0], Action::make(ActionKind::F, 1, 0));
  EXPECT_EQ(s.device_actions[1].back(), Action::make(ActionKind::W, 3, 3));
  EXPECT_EQ(count_kind(s, ActionKind::I), 16);
  EXPECT_EQ(count_kind(s, ActionKind::W), 16);
  EXPECT_EQ(count_kind(s, ActionKind::B), 0);
}

TEST(PytorchCsvFixtures, LegacyComputeOnlyIsDetectedWithoutAnyBW) {
  // The legacy file writes the input gradient as B and has no full backward at all, so there is
  // no BW to see; its W cells without any I give the lettering away.
  Schedule legacy = load_pytorch_csv(kData + "legacy/loop_zb_2rank_4stage_compute.csv");
  Schedule current = load_pytorch_csv(kData + "loop_zb_2rank_4stage_compute.csv");
  EXPECT_EQ(legacy, current);
  EXPECT_EQ(load_pytorch_csv(kData + "legacy/loop_zb_2rank_4stage_compute.csv", {CsvLettering::Legacy}), current);
  // Forcing the current lettering reads B as a full backward.
  Schedule forced = load_pytorch_csv(kData + "legacy/loop_zb_2rank_4stage_compute.csv", {CsvLettering::Current});
  EXPECT_EQ(forced.device_actions[0][4], Action::make(ActionKind::B, 2, 0));
  EXPECT_EQ(count_kind(forced, ActionKind::I), 0);
  EXPECT_EQ(count_kind(forced, ActionKind::B), 16);
}

TEST(PytorchCsvFixtures, LoopPlacementComputeAndComms) {
  Schedule s = load_pytorch_csv(kData + "loop_mixed_2rank_4stage_comms.csv");
  EXPECT_EQ(s.num_devices, 2);
  EXPECT_EQ(s.stage_device, loop_placement(2, 4));
  EXPECT_EQ(s.num_microbatches, 4);
  EXPECT_TRUE(s.has_communication());
  // Rank 0: 16 compute + 24 transfers (stage 0 has no RECV_F, SEND_B; stage 2 talks both ways);
  // rank 1: 24 compute + 24 transfers (stage 3 has no SEND_F, RECV_B).
  ASSERT_EQ(s.device_actions[0].size(), 40u);
  ASSERT_EQ(s.device_actions[1].size(), 48u);
  const std::vector<std::string> row0 = cells(s, 0);
  EXPECT_EQ(std::vector<std::string>(row0.begin(), row0.begin() + 5),
            (std::vector<std::string>{"0F0", "0SEND_F0", "0F1", "0SEND_F1", "2RECV_F0"}));
  EXPECT_EQ(s.device_actions[0][8], Action::make(ActionKind::B, 2, 0));
  EXPECT_EQ(s.device_actions[1][8], Action::make(ActionKind::I, 3, 0));
  // Stages 0 and 2 run full backwards, stages 1 and 3 split ones.
  EXPECT_EQ(count_kind(s, ActionKind::B), 8);
  EXPECT_EQ(count_kind(s, ActionKind::I), 8);
  EXPECT_EQ(count_kind(s, ActionKind::W), 8);
  EXPECT_EQ(count_kind(s, ActionKind::SendF), 12);
  EXPECT_EQ(count_kind(s, ActionKind::RecvB), 12);
}

TEST(PytorchCsvFixtures, LegacyComputeAndCommsConvertsToTheCurrentFile) {
  Schedule legacy = load_pytorch_csv(kData + "legacy/loop_mixed_2rank_4stage_comms.csv");
  EXPECT_EQ(legacy, load_pytorch_csv(kData + "loop_mixed_2rank_4stage_comms.csv"));
  EXPECT_EQ(load_pytorch_csv(kData + "legacy/loop_mixed_2rank_4stage_comms.csv", {CsvLettering::Legacy}), legacy);
  // Written back in the current lettering, it is the current file byte for byte.
  EXPECT_EQ(write_pytorch_csv(legacy), read_text_file(kData + "loop_mixed_2rank_4stage_comms.csv"));
}

TEST(PytorchCsvFixtures, LegacyFileReadWithTheCurrentLetteringNamesTheFirstBW) {
  const std::string path = kData + "legacy/loop_mixed_2rank_4stage_comms.csv";
  try {
    load_pytorch_csv(path, {CsvLettering::Current});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), path +
                                         ":1:58: cannot parse action '2BW0': BW is the legacy lettering's full "
                                         "backward, but the file is read with the current lettering");
  }
}

TEST(PytorchCsvFixtures, CurrentFileReadWithTheLegacyLetteringNamesTheFirstI) {
  const std::string path = kData + "loop_zb_2rank_4stage_compute.csv";
  try {
    load_pytorch_csv(path, {CsvLettering::Legacy});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), path +
                                         ":1:18: cannot parse action '2I0': the legacy lettering has no I (its B "
                                         "is the input gradient), but the file is read with the legacy lettering");
  }
}

TEST(PytorchCsvFixtures, DualPipeVOnAVPlacement) {
  Schedule s = load_pytorch_csv(kData + "dualpipev_3rank_7mb.csv");
  EXPECT_EQ(s.num_devices, 3);
  EXPECT_EQ(s.num_stages(), 6);
  EXPECT_EQ(s.stage_device, v_placement(3, 6));
  EXPECT_EQ(s.num_microbatches, 7);
  EXPECT_FALSE(s.has_communication());
  EXPECT_EQ(s.device_actions[0].size(), 27u);
  EXPECT_EQ(s.device_actions[1].size(), 25u);
  EXPECT_EQ(s.device_actions[2].size(), 24u);
  EXPECT_EQ(s.device_actions[0][12], Action::overlap(0, 5, 5, 2, ActionKind::B));
  EXPECT_EQ(s.device_actions[2][8], Action::overlap(3, 3, 2, 0, ActionKind::B));
  EXPECT_EQ(count_kind(s, ActionKind::Overlap), 20);
  // Composite cells are written back unquoted, as PyTorch's csv.writer does: the file round-trips.
  EXPECT_EQ(write_pytorch_csv(s), read_text_file(kData + "dualpipev_3rank_7mb.csv"));
}

TEST(PytorchCsvFixtures, ComputeOnlyFileIsWrittenWithoutIdleCells) {
  // The file has one idle slot per rank: ",," on rank 0 and a leading "," on rank 1.
  const std::string original = read_text_file(kData + "loop_zb_2rank_4stage_compute.csv");
  std::string expected;
  for (size_t i = 0; i < original.size(); ++i) {
    const bool idle = original[i] == ',' && (i == 0 || original[i - 1] == ',' || original[i - 1] == '\n');
    if (!idle) expected += original[i];
  }
  ASSERT_EQ(expected.size() + 2, original.size());
  EXPECT_EQ(write_pytorch_csv(load_pytorch_csv(kData + "loop_zb_2rank_4stage_compute.csv")), expected);
}

TEST(PytorchCsvFixtures, FixturesValidate) {
  for (const char* file :
       {"loop_zb_2rank_4stage_compute.csv", "loop_mixed_2rank_4stage_comms.csv", "dualpipev_3rank_7mb.csv",
        "legacy/loop_zb_2rank_4stage_compute.csv", "legacy/loop_mixed_2rank_4stage_comms.csv",
        "handwritten_1f1b_2rank_4mb.csv", "handwritten_fsdp_2rank_2mb.csv"}) {
    Schedule s = load_pytorch_csv(kData + file);
    std::string diagnostics;
    for (const Diagnostic& d : validate(s)) diagnostics += d.to_string() + "\n";
    EXPECT_EQ(diagnostics, "") << file;
  }
}

TEST(PytorchCsvFixtures, TheCommsFileIsItsComputeOrderLowered) {
  // PyTorch's compute_comms form of a schedule carries the same compute order as its compute_only
  // form; FlexPipe's lowering puts the transfers exactly where the file has them.
  const Schedule comms = load_pytorch_csv(kData + "loop_mixed_2rank_4stage_comms.csv");
  const Schedule compute = strip_communication(comms);
  EXPECT_FALSE(compute.has_communication());
  EXPECT_EQ(lower(compute), comms);
}

TEST(PytorchCsvFixtures, LoweringThenParsingBackIsStable) {
  for (const char* file : {"loop_zb_2rank_4stage_compute.csv", "dualpipev_3rank_7mb.csv"}) {
    const Schedule lowered = lower(load_pytorch_csv(kData + file));
    EXPECT_TRUE(lowered.has_communication()) << file;
    EXPECT_EQ(parse_pytorch_csv(write_pytorch_csv(lowered), file), lowered) << file;
    EXPECT_TRUE(validate(lowered).empty()) << file;
  }
}

// ---- PyTorch's published artifacts, when placed under ../shared/reference/pytorch/ ----------------

TEST(PytorchCsvPublished, EveryPlacedArtifactValidatesAndRoundTrips) {
  const std::filesystem::path dir = std::filesystem::path(FLEXPIPE_TEST_DATA) / "../../../shared/reference/pytorch";
  if (!std::filesystem::is_directory(dir))
    GTEST_SKIP() << "no PyTorch artifacts at " << dir.lexically_normal().string() << "; place them there to check them";
  int checked = 0;
  for (const auto& entry : std::filesystem::recursive_directory_iterator(dir)) {
    if (!entry.is_regular_file() || entry.path().extension() != ".csv") continue;
    const std::string file = entry.path().string();
    const Schedule s = load_pytorch_csv(file);
    std::string diagnostics;
    for (const Diagnostic& d : validate(s)) diagnostics += d.to_string() + "\n";
    EXPECT_EQ(diagnostics, "") << file;
    EXPECT_EQ(parse_pytorch_csv(write_pytorch_csv(s), file), s) << file;
    ++checked;
  }
  if (checked == 0) GTEST_SKIP() << "no .csv file under " << dir.lexically_normal().string();
}

// ---- hand-written files in the current lettering ------------------------------------------------

TEST(PytorchCsvHandwritten, OneFOneBWithIdleSlots) {
  Schedule s = load_pytorch_csv(kData + "handwritten_1f1b_2rank_4mb.csv");
  EXPECT_EQ(s.stage_device, (std::vector<int32_t>{0, 1}));
  EXPECT_EQ(s.num_microbatches, 4);
  EXPECT_EQ(cells(s, 0), (std::vector<std::string>{"0F0", "0F1", "0B0", "0F2", "0B1", "0F3", "0B2", "0B3"}));
  EXPECT_EQ(cells(s, 1), (std::vector<std::string>{"1F0", "1B0", "1F1", "1B1", "1F2", "1B2", "1F3", "1B3"}));
}

TEST(PytorchCsvHandwritten, FsdpKindsBecomeCustomKinds) {
  Schedule s = load_pytorch_csv(kData + "handwritten_fsdp_2rank_2mb.csv");
  ASSERT_EQ(s.custom_ops.size(), 3u);
  EXPECT_EQ(s.custom_ops[0].name, "UNSHARD");
  EXPECT_EQ(s.custom_ops[1].name, "RESHARD");
  EXPECT_EQ(s.custom_ops[2].name, "REDUCE_GRAD");
  for (const CustomOpKind& op : s.custom_ops) {
    EXPECT_FALSE(op.per_microbatch) << op.name;
    EXPECT_EQ(op.duration, 0) << op.name;
    EXPECT_EQ(op.memory, 0) << op.name;
    EXPECT_TRUE(op.before.empty()) << op.name;
  }
  EXPECT_TRUE(s.custom_ops[0].communicates);
  EXPECT_FALSE(s.custom_ops[1].communicates);
  EXPECT_TRUE(s.custom_ops[2].communicates);
  EXPECT_TRUE(s.custom_ops[0].after.empty());
  EXPECT_EQ(s.custom_ops[2].after, (std::vector<CustomDependency>{{ActionKind::B, 0, true}, {ActionKind::W, 0, true}}));
  EXPECT_EQ(s.device_actions[0].front(), Action::custom_op(0, 0, -1));
  EXPECT_EQ(s.device_actions[1][11], Action::custom_op(2, 1, -1));
  EXPECT_TRUE(s.has_communication());
  EXPECT_EQ(write_pytorch_csv(s), read_text_file(kData + "handwritten_fsdp_2rank_2mb.csv"));
}

TEST(PytorchCsvHandwritten, OnlyTheFsdpKindsInUseAreDeclaredInFixedOrder) {
  Schedule s = parse_named("0F0,0REDUCE_GRAD,0B0,0UNSHARD\n", "fsdp");
  ASSERT_EQ(s.custom_ops.size(), 2u);
  EXPECT_EQ(s.custom_ops[0].name, "UNSHARD");
  EXPECT_EQ(s.custom_ops[1].name, "REDUCE_GRAD");
  EXPECT_EQ(cells(s, 0), (std::vector<std::string>{"0F0", "0REDUCE_GRAD", "0B0", "0UNSHARD"}));
}

// ---- text-level details -------------------------------------------------------------------------

TEST(PytorchCsvText, CrlfQuotesBlanksAndBomReadLikeThePlainFile) {
  const Schedule plain = parse_named("0F0,(0F1;0B0)OVERLAP_F_B\n1F0,1B0\n", "x");
  EXPECT_EQ(parse_named("0F0,(0F1;0B0)OVERLAP_F_B\r\n1F0,1B0\r\n", "x"), plain);
  EXPECT_EQ(parse_named("0F0,(0F1;0B0)OVERLAP_F_B\n1F0,1B0", "x"), plain);
  EXPECT_EQ(parse_named("\"0F0\",\"(0F1;0B0)OVERLAP_F_B\"\n 1F0 ,\t1B0\n", "x"), plain);
  EXPECT_EQ(parse_named("\xEF\xBB\xBF"
                        "0F0,,(0F1;0B0)OVERLAP_F_B,\n,1F0,1B0\n",
                        "x"),
            plain);
  EXPECT_EQ(parse_named("0F0,(0F1;0B0)OVERLAP_F_B\r1F0,1B0\r", "x"), plain);
}

TEST(PytorchCsvText, BlankLineIsAnIdleRank) {
  Schedule s = parse_named("0F0\n\n1F0\n", "x");
  EXPECT_EQ(s.num_devices, 3);
  EXPECT_EQ(s.stage_device, (std::vector<int32_t>{0, 2}));
  EXPECT_TRUE(s.device_actions[1].empty());
}

// ---- round trips --------------------------------------------------------------------------------

TEST(PytorchCsvRoundTrip, WriteThenParseIsIdentity) {
  Schedule s = make_schedule("rt", 3, 2, v_placement(3, 6));
  using K = ActionKind;
  s.custom_ops = parse_named("0UNSHARD,0RESHARD,0REDUCE_GRAD,0F0,0F1\n", "rt").custom_ops;
  s.device_actions[0] = {Action::custom_op(0, 0, -1),       Action::make(K::F, 0, 0), Action::make(K::SendF, 0, 0),
                         Action::overlap(5, 0, 0, 1, K::I), Action::make(K::W, 0, 1), Action::custom_op(2, 5, -1),
                         Action::custom_op(1, 0, -1)};
  s.device_actions[1] = {Action::make(K::RecvF, 1, 0), Action::make(K::F, 1, 1), Action::make(K::RecvB, 4, 1),
                         Action::make(K::B, 4, 1), Action::make(K::SendB, 4, 1)};
  s.device_actions[2] = {Action::make(K::F, 2, 0), Action::make(K::F, 3, 1), Action::make(K::I, 3, 1)};
  const std::string text = write_pytorch_csv(s);
  EXPECT_EQ(text,
            "0UNSHARD,0F0,0SEND_F0,(5F0;0I1)OVERLAP_F_B,0W1,5REDUCE_GRAD,0RESHARD\n"
            "1RECV_F0,1F1,4RECV_B1,4B1,4SEND_B1\n"
            "2F0,3F1,3I1\n");
  EXPECT_EQ(parse_pytorch_csv(text, "rt.csv"), s);
}

TEST(PytorchCsvRoundTrip, BuiltinSchedulesAndTheirLoweredForms) {
  ASSERT_FALSE(builtin_schedules().empty());
  for (const BuiltinSchedule& builtin : builtin_schedules()) {
    const Schedule s = make_builtin(builtin.name, {4, 8, 0});
    if (s.num_pipelines != 1) continue;  // written only as .json, see WriteRefusesTwoPipelines
    Schedule back = parse_pytorch_csv(write_pytorch_csv(s), s.name + ".csv");
    EXPECT_EQ(back, s) << builtin.name;
    // Lowering then parsing back is stable.
    const Schedule lowered = lower(s);
    EXPECT_EQ(parse_pytorch_csv(write_pytorch_csv(lowered), s.name + ".csv"), lowered) << builtin.name;
  }
}

// ---- errors -------------------------------------------------------------------------------------

TEST(PytorchCsvErrors, BadCellNamesLineAndColumn) {
  EXPECT_EQ(error_of("0F0,1F0\n1F0,1F1,3F0,3F1,2BX0\n"),
            "s.csv:2:17: cannot parse action '2BX0': unknown action type 'BX'");
  EXPECT_EQ(error_of("0F0, \"1Y0\"\n"), "s.csv:1:6: cannot parse action '1Y0': unknown action type 'Y'");
  EXPECT_EQ(error_of("F0\n"), "s.csv:1:1: cannot parse action 'F0': expected a stage number first");
  EXPECT_EQ(error_of("0F0,12\n"), "s.csv:1:5: cannot parse action '12': missing the action type after the stage");
  EXPECT_EQ(error_of("0F\n"), "s.csv:1:1: cannot parse action '0F': F needs a micro-batch");
  EXPECT_EQ(error_of("0F0,0UNSHARD3\n"), "s.csv:1:5: cannot parse action '0UNSHARD3': UNSHARD takes no micro-batch");
  EXPECT_EQ(error_of("0F99999999999\n"),
            "s.csv:1:1: cannot parse action '0F99999999999': micro-batch 99999999999 is too large");
  // PyTorch's prefix match would read "2F0x" as 2F0; we do not.
  EXPECT_EQ(error_of("2F0x\n"), "s.csv:1:1: cannot parse action '2F0x': unknown action type 'F0x'");
  // Binary in a cell is quoted printably: a NUL no longer cuts the message, nor an escape code reach
  // the terminal.
  EXPECT_EQ(error_of(std::string("0F0,1\x1b\0Q\n", 9)),
            "s.csv:1:5: cannot parse action '1\\x1B\\x00Q': unknown action type '\\x1B\\x00Q'");
}

TEST(PytorchCsvErrors, KindsPyTorchDoesNotHave) {
  EXPECT_EQ(error_of("0F0,0OPT\n"), "s.csv:1:5: cannot parse action '0OPT': PyTorch's CSV has no OPT action");
  EXPECT_EQ(error_of("0R0\n"), "s.csv:1:1: cannot parse action '0R0': PyTorch's CSV has no R action");
  EXPECT_EQ(error_of("0OFFLOAD0\n"), "s.csv:1:1: cannot parse action '0OFFLOAD0': PyTorch's CSV has no OFFLOAD action");
  EXPECT_EQ(error_of("0CUSTOM0_1\n"), "s.csv:1:1: cannot parse action '0CUSTOM0_1': unknown action type 'CUSTOM0_'");
}

TEST(PytorchCsvErrors, BadComposites) {
  EXPECT_EQ(error_of("(0F7)OVERLAP_F_B\n"),
            "s.csv:1:1: cannot parse action '(0F7)OVERLAP_F_B': expected '(FORWARD;BACKWARD)OVERLAP_F_B'");
  EXPECT_EQ(error_of("(0F7;7B3)OVERLAP\n"),
            "s.csv:1:1: cannot parse action '(0F7;7B3)OVERLAP': expected '(FORWARD;BACKWARD)OVERLAP_F_B'");
  EXPECT_EQ(error_of("(0F7;7B3;7W3)OVERLAP_F_B\n"),
            "s.csv:1:1: cannot parse action '(0F7;7B3;7W3)OVERLAP_F_B': expected '(FORWARD;BACKWARD)OVERLAP_F_B'");
  EXPECT_EQ(error_of("(0F7;7B3\n"),
            "s.csv:1:1: cannot parse action '(0F7;7B3': expected '(FORWARD;BACKWARD)OVERLAP_F_B'");
  EXPECT_EQ(error_of("(0F7;7W3)OVERLAP_F_B\n"),
            "s.csv:1:1: cannot parse action '(0F7;7W3)OVERLAP_F_B': the second half of OVERLAP_F_B must be a backward "
            "(B or I), not '7W3'");
  EXPECT_EQ(error_of("(7B3;0F7)OVERLAP_F_B\n"),
            "s.csv:1:1: cannot parse action '(7B3;0F7)OVERLAP_F_B': the first half of OVERLAP_F_B must be a forward "
            "(F), not '7B3'");
  EXPECT_EQ(error_of("(0F7;7X3)OVERLAP_F_B\n"),
            "s.csv:1:1: cannot parse action '(0F7;7X3)OVERLAP_F_B': unknown action type 'X'");
}

TEST(PytorchCsvErrors, StageOnTwoRanks) {
  EXPECT_EQ(
      error_of("0F0,1F0\n2F0,1B0\n"),
      "s.csv:2:5: stage 1 is on rank 1 here, but on rank 0 at line 1, column 5 ('1F0'); a stage belongs to one rank");
  EXPECT_EQ(
      error_of("0F0\n(1F0;0B0)OVERLAP_F_B\n"),
      "s.csv:2:1: stage 0 is on rank 1 here, but on rank 0 at line 1, column 1 ('0F0'); a stage belongs to one rank");
}

TEST(PytorchCsvErrors, EmptyFileAndNoActions) {
  EXPECT_EQ(error_of(""), "s.csv: empty file");
  EXPECT_EQ(error_of("\xEF\xBB\xBF"), "s.csv: empty file");
  EXPECT_EQ(error_of(",,\n\n"), "s.csv: no actions (every cell is empty)");
  EXPECT_EQ(error_of("0UNSHARD\n"), "s.csv: no action names a micro-batch");
}

TEST(PytorchCsvErrors, StagesAndMicroBatchesMustAllAppear) {
  EXPECT_EQ(error_of("0F0\n2F0\n"), "s.csv: stage 1 appears in no cell, so its rank is unknown (stages run 0..2)");
  EXPECT_EQ(error_of("0F0,0F2\n"), "s.csv: micro-batch 1 appears in no cell (micro-batches run 0..2)");
  // A huge number is reported, not allocated.
  EXPECT_EQ(error_of("0F0\n2000000000F0\n"),
            "s.csv: stage 1 appears in no cell, so its rank is unknown (stages run 0..2000000000)");
}

TEST(PytorchCsvErrors, MixedLettering) {
  EXPECT_EQ(error_of("0F0,0BW0\n1F0,1I0,1W0\n"),
            "s.csv:2:5: '1I0' uses the current lettering (I = input gradient), but '0BW0' at line 1, column 5 uses the "
            "legacy one (BW = full backward)");
}

TEST(PytorchCsvErrors, BadQuoting) {
  EXPECT_EQ(error_of("0F0,\"0F1\n"), "s.csv:1:5: unterminated quoted cell");
  EXPECT_EQ(error_of("0F0,\"0F1\"x,0F2\n"), "s.csv:1:10: unexpected text after a quoted cell");
}

// ---- what cannot be written ---------------------------------------------------------------------

TEST(PytorchCsvWrite, RefusesActionsPyTorchHasNoCellFor) {
  Schedule s = make_schedule("opt", 1, 1, {0});
  s.device_actions[0] = {Action::make(ActionKind::F, 0, 0), Action::make(ActionKind::B, 0, 0),
                         Action::make(ActionKind::Opt, 0)};
  EXPECT_EQ(write_error_of(s), "device 0 #2 0OPT: PyTorch's schedule CSV has no OPT action (save it as .json)");
  s.device_actions[0][2] = Action::make(ActionKind::R, 0, 0);
  EXPECT_EQ(write_error_of(s), "device 0 #2 0R0: PyTorch's schedule CSV has no R action (save it as .json)");
  s.device_actions[0][2] = Action::make(ActionKind::Reload, 0, 0);
  EXPECT_EQ(write_error_of(s), "device 0 #2 0RELOAD0: PyTorch's schedule CSV has no RELOAD action (save it as .json)");

  CustomOpKind mine;
  mine.name = "MYOP";
  s.custom_ops = {mine};
  s.device_actions[0][2] = Action::custom_op(0, 0, 0);
  EXPECT_EQ(write_error_of(s), "device 0 #2 0MYOP0: PyTorch's schedule CSV has no MYOP action (save it as .json)");
  s.custom_ops[0].name = "UNSHARD";
  EXPECT_EQ(write_error_of(s),
            "device 0 #2 0UNSHARD0: PyTorch's UNSHARD is per stage, not per micro-batch (save it as .json)");
}

TEST(PytorchCsvWrite, RefusesTwoPipelines) {
  Schedule s = make_schedule("dualpipe", 2, 2, bidirectional_placement(2), 2);
  EXPECT_EQ(write_error_of(s), "PyTorch's schedule CSV holds one pipeline, but 'dualpipe' runs 2 (save it as .json)");
}

}  // namespace
}  // namespace flexpipe
