// Golden diagnostics: malformed programs and the exact messages they produce, so that a change to
// a message or to where a caret points is a visible change. Every error of a program is reported.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include "flexpipe/lang/program.h"
#include "flexpipe/support/error.h"

namespace flexpipe {
namespace {

std::string compile_error(const std::string& text, const std::map<std::string, int64_t>& defines = {}) {
  try {
    compile_program(text, "bad.fps", defines);
  } catch (const Error& e) {
    return e.what();
  }
  return "(compiled without error)";
}

struct Golden {
  const char* name;
  const char* program;
  const char* message;
};

const Golden kGolden[] = {
    {"unknown_name", "devices 2\nmicrobatches 2\nstages 2\nfor d in 0..q { F(d) }\n",
     "bad.fps:4:13: error: unknown name 'q'\n    4 | for d in 0..q { F(d) }\n      |             ^\n  hint: no name is defined here"},
    {"unknown_name_suggestion",
     "param p = 2\ndevices p\nmicrobatches 2\nstages p\nlet warmup = 1\nrepeat warmpu { F(0) }\n",
     "bad.fps:6:8: error: unknown name 'warmpu'\n    6 | repeat warmpu { F(0) }\n      |        ^\n  hint: did you mean 'warmup'?"},
    {"missing_paren_and_bad_let",
     "devices 2\nmicrobatches 2\nstages 2\nfor d in 0..2 {\n  F(d\n  B(d)\n}\nlet x = = 3\n",
     "bad.fps:6:3: error: expected ')' to close the arguments, found 'B'\n    6 |   B(d)\n      |   ^\nbad.fps:8:9: error: expected an expression, found '='\n    8 | let x = = 3\n      |         ^"},
    {"unclosed_block", "devices 2\nmicrobatches 2\nstages 2\nfor d in 0..2 {\n  F(d)\n",
     "bad.fps:4:15: error: this '{' is never closed\n    4 | for d in 0..2 {\n      |               ^\n  hint: add '}' at the end of the block"},
    {"unmatched_brace", "devices 2\nmicrobatches 2\nstages 2\nF(0)\n}\n",
     "bad.fps:5:1: error: unmatched '}'\n    5 | }\n      | ^\n  hint: remove it, or open its block with '{'"},
    {"bad_character", "devices 2\nmicrobatches 2\nstages 2\nlet x = 1 | 2\n",
     "bad.fps:4:11: error: unexpected character '|'\n    4 | let x = 1 | 2\n      |           ^\n  hint: write `or` for a logical or\nbad.fps:4:13: error: expected a statement, found number 2\n    4 | let x = 1 | 2\n      |             ^\n  hint: a statement starts with a keyword (let, for, if, ...), an action such as F(s, mb), or a pattern call"},
    {"bang", "devices 2\nmicrobatches 2\nstages 2\nif !x { F(0) }\n",
     "bad.fps:4:4: error: unexpected character '!'\n    4 | if !x { F(0) }\n      |    ^\n  hint: write `not x` for a logical not, `!=` for not equal"},
    {"unterminated_string", "param p = 2 where p >= 2 \"needs\ndevices p\nmicrobatches 2\nstages 2\n",
     "bad.fps:1:26: error: unterminated string\n    1 | param p = 2 where p >= 2 \"needs\n      |                          ^\n  hint: a string ends with \" on the same line\nbad.fps:2:1: error: expected the message shown when the condition fails, found 'devices'\n    2 | devices p\n      | ^\n  hint: write: where p >= 2 \"needs at least 2 devices\""},
    {"chained_comparison", "devices 2\nmicrobatches 2\nstages 2\nlet x = 0 < 1 < 2\n",
     "bad.fps:4:15: error: comparisons do not chain\n    4 | let x = 0 < 1 < 2\n      |               ^\n  hint: write a < b and b < c"},
    {"param_checks_all_reported",
     "param p = 1 where p >= 2 \"needs at least 2 devices\"\nparam m = 0 where m > 0 \"needs a micro-batch\"\ndevices p\nmicrobatches 1\nstages p\n",
     "bad.fps:1:19: error: p = 1: needs at least 2 devices\n    1 | param p = 1 where p >= 2 \"needs at least 2 devices\"\n      |                   ^\nbad.fps:2:19: error: m = 0: needs a micro-batch\n    2 | param m = 0 where m > 0 \"needs a micro-batch\"\n      |                   ^"},
    {"message_shows_values",
     "param p = 3\nparam m = 4 where m >= 2 * p \"needs m >= 2p = {2 * p}, not {m}\"\ndevices p\nmicrobatches m\nstages p\n",
     "bad.fps:2:19: error: m = 4: needs m >= 2p = 6, not 4\n    2 | param m = 4 where m >= 2 * p \"needs m >= 2p = {2 * p}, not {m}\"\n      |                   ^"},
    {"message_value_unclosed", "param p = 1 where p >= 2 \"needs {p\"\ndevices p\nmicrobatches 1\nstages p\n",
     "bad.fps:1:26: error: '{' opens a value in the message, but no '}' closes it\n    1 | param p = 1 where p >= 2 \"needs {p\"\n      |                          ^\n  hint: a message shows a value as {EXPR}: \"needs m >= 2p = {2 * p}\""},
    {"message_value_unknown_name", "param p = 1 where p >= 2 \"needs {2 * q}\"\ndevices p\nmicrobatches 1\nstages p\n",
     "bad.fps:1:38: error: unknown name 'q'\n    1 | param p = 1 where p >= 2 \"needs {2 * q}\"\n      |                                      ^\n  hint: did you mean 'p'?"},
    {"description_twice", "description \"a\"\ndescription \"b\"\ndevices 1\nmicrobatches 1\nstages 1\n",
     "bad.fps:2:1: error: 'description' is declared twice (first at 1:1)\n    2 | description \"b\"\n      | ^"},
    {"param_after_statement", "devices 2\nmicrobatches 2\nstages 2\nparam p = 2\n",
     "bad.fps:4:1: error: parameters come first: this 'param' follows a statement at 1:1\n    4 | param p = 2\n      | ^\n  hint: move every param to the top of the program"},
    {"declared_twice", "devices 2\nmicrobatches 2\nstages 2\ndevices 3\n",
     "bad.fps:4:1: error: 'devices' is declared twice (first at 1:1)\n    4 | devices 3\n      | ^"},
    {"missing_declarations", "let x = 1\n",
     "bad.fps:1:1: error: the program never declares 'devices', 'microbatches', 'stages'\n    1 | let x = 1\n      | ^\n  hint: every program declares devices, microbatches and stages, e.g. `devices p`"},
    {"declaration_in_block", "devices 2\nmicrobatches 2\nstages 2\nfor d in 0..2 { devices 2 }\n",
     "bad.fps:4:17: error: 'devices' is a declaration: write it at the top level\n    4 | for d in 0..2 { devices 2 }\n      |                 ^\n  hint: declarations cannot sit inside a block"},
    {"assign_parameter", "param p = 2\ndevices 2\nmicrobatches 2\nstages 2\np = 3\n",
     "bad.fps:5:1: error: cannot assign to parameter 'p'\n    5 | p = 3\n      | ^\n  hint: parameters are fixed once set; copy it with `let`"},
    {"assign_loop_variable", "devices 2\nmicrobatches 2\nstages 2\nfor i in 0..2 { i += 1 }\n",
     "bad.fps:4:17: error: cannot assign to loop variable 'i'\n    4 | for i in 0..2 { i += 1 }\n      |                 ^\n  hint: use a `while` loop to control the counter yourself"},
    {"unknown_action",
     "devices 2\nmicrobatches 2\nstages 2\nFWD(0, 0)\n", "bad.fps:4:1: error: unknown action or pattern 'FWD'\n    4 | FWD(0, 0)\n      | ^\n  hint: action kinds: F B I W R OFFLOAD RELOAD OPT SEND_F RECV_F SEND_B RECV_B; declare a new one with `op FWD { ... }` before its first use"},
    {"unknown_op_kind", "devices 2\nmicrobatches 2\nstages 2\nUNSHARD(0)\n",
     "bad.fps:4:1: error: unknown action or pattern 'UNSHARD'\n    4 | UNSHARD(0)\n      | ^\n  hint: action kinds: F B I W R OFFLOAD RELOAD OPT SEND_F RECV_F SEND_B RECV_B; declare a new one with `op UNSHARD { ... }` before its first use"},
    {"action_arity", "devices 2\nmicrobatches 2\nstages 2\nF()\nB(0, 1, 2)\nOPT(0, 1)\n",
     "bad.fps:4:1: error: F() needs a stage\n    4 | F()\n      | ^\n  hint: write F(s) for the next micro-batch of stage s, or F(s, mb)\nbad.fps:5:1: error: B takes a stage and a micro-batch, not 3 arguments\n    5 | B(0, 1, 2)\n      | ^\nbad.fps:6:1: error: OPT takes one argument, the stage (got 2)\n    6 | OPT(0, 1)\n      | ^"},
    {"pattern_arity", "devices 2\nmicrobatches 2\nstages 2\npattern pair(s) { F(s)  B(s) }\npair(0, 1)\n",
     "bad.fps:5:1: error: pattern 'pair' takes 1 argument, not 2\n    5 | pair(0, 1)\n      | ^\n  hint: defined at 4:9"},
    {"self_recursive_pattern", "devices 2\nmicrobatches 2\nstages 2\npattern loop_forever(s) { loop_forever(s) }\n",
     "bad.fps:4:27: error: pattern 'loop_forever' cannot call itself\n    4 | pattern loop_forever(s) { loop_forever(s) }\n      |                           ^\n  hint: patterns do not recurse: write the repetition with for, repeat or while"},
    {"overlap_halves", "devices 2\nmicrobatches 2\nstages 2\nB(0, 0) & F(1, 0)\n",
     "bad.fps:4:1: error: an overlapped action starts with its forward: F(...) & B(...)\n    4 | B(0, 0) & F(1, 0)\n      | ^\nbad.fps:4:11: error: the second half of an overlapped action is a backward, B or I\n    4 | B(0, 0) & F(1, 0)\n      |           ^"},
    {"reserved_word", "devices 2\nmicrobatches 2\nstages 2\nlet for = 1\n",
     "bad.fps:4:5: error: 'for' is a reserved word and cannot name a variable\n    4 | let for = 1\n      |     ^\n  hint: choose another name"},
    {"real_in_expression", "devices 2\nmicrobatches 2\nstages 2\nlet x = 1.5\n",
     "bad.fps:4:9: error: 1.5 is not an integer\n    4 | let x = 1.5\n      |         ^\n  hint: reals are allowed only in an op's duration and memory"},
    {"division_by_zero", "devices 2\nmicrobatches 2\nstages 2\nlet z = 0\nlet x = 4 / z\n",
     "bad.fps:5:11: error: division by zero\n    5 | let x = 4 / z\n      |           ^"},
    {"stage_out_of_range", "devices 2\nmicrobatches 2\nstages 2\nF(2, 0)\n",
     "bad.fps:4:3: error: stage 2 is out of range: the program has 2 stages (0..1)\n    4 | F(2, 0)\n      |   ^"},
    {"microbatch_out_of_range", "devices 2\nmicrobatches 2\nstages 2\nF(0, 5)\n",
     "bad.fps:4:6: error: micro-batch 5 is out of range: the program has 2 micro-batches (0..1)\n    4 | F(0, 5)\n      |      ^"},
    {"next_exhausted", "devices 2\nmicrobatches 2\nstages 2\nF(0)\nF(0)\nF(0)\n",
     "bad.fps:6:1: error: F(0): every micro-batch of stage 0 already has its F\n    6 | F(0)\n      | ^\n  hint: count(F, 0) is 2 here"},
    {"step_limit", "devices 2\nmicrobatches 2\nstages 2\nwhile 1 { let x = 1 }\n",
     "bad.fps:4:1: error: step limit of 10000000 reached: the program runs away\n    4 | while 1 { let x = 1 }\n      | ^\n  hint: a `while` whose condition never turns false? (CompileOptions::max_steps raises the limit)"},
    {"wrong_device_in_on", "devices 2\nmicrobatches 2\nstages 2\non 0 { F(1, 0) }\n",
     "bad.fps:4:8: error: 1F0 runs on device 1, not on device 0 of this `on` block\n    4 | on 0 { F(1, 0) }\n      |        ^\n  hint: stage 1 is placed on device 1"},
    {"w_without_device", "devices 2\nmicrobatches 2\nstages 2\nI(0, 0)\nW()\n",
     "bad.fps:5:1: error: W() takes the oldest pending weight gradient of a device: it needs a device\n    5 | W()\n      | ^\n  hint: write it inside `on d { ... }`, or name the stage: W(s)"},
    {"greedy_with_actions", "devices 2\nmicrobatches 2\nstages 2\nF(0, 0)\ngreedy { prefer B, F }\n",
     "bad.fps:4:1: error: a program with a greedy policy emits no actions of its own\n    4 | F(0, 0)\n      | ^\n  hint: the greedy policy at 5:1 writes every device's list; remove this action, or write `prefer written` to have it reorder the lists written here"},
    {"greedy_bad_kinds", "devices 2\nmicrobatches 2\nstages 2\ngreedy { prefer F, I }\n",
     "bad.fps:4:1: error: `prefer` lists the kinds to run: F and B, or F, I and W\n    4 | greedy { prefer F, I }\n      | ^\n  hint: e.g. `prefer B, F` for 1F1B, `prefer I, F, W` to fill bubbles with W, `prefer written` for the program's own order"},
    {"greedy_cooldown_forward", "devices 2\nmicrobatches 2\nstages 2\ngreedy { prefer I, F, W\n cooldown F }\n",
     "bad.fps:5:11: error: `cooldown` ranks B, I and W, not 'F'\n    5 |  cooldown F }\n      |           ^\n  hint: the cool-down starts once a device has started its last F: only backwards remain"},
    {"greedy_written_missing",
     "devices 2\nmicrobatches 1\nstages 2\ngreedy { prefer written }\nF(0, 0)  F(1, 0)  B(1, 0)\n",
     "bad.fps:4:1: error: `prefer written` needs every F and backward, but no list holds 0B0\n    4 | greedy { prefer written }\n      | ^\n  hint: write it on device 0"},
    {"greedy_written_twice", "devices 2\nmicrobatches 1\nstages 2\ngreedy { prefer written }\nF(0, 0)  F(1, 0)  B(1, 0)  B(0, 0)  F(0, 0)\n", "bad.fps:5:37: error: 0F0 is written twice: `prefer written` runs each action once\n    5 | F(0, 0)  F(1, 0)  B(1, 0)  B(0, 0)  F(0, 0)\n      |                                     ^"},
    {"greedy_written_mixed",
     "devices 2\nmicrobatches 1\nstages 2\ngreedy { prefer written }\nF(0, 0)  F(1, 0)  I(1, 0)  W(1, 0)  B(0, 0)\n",
     "bad.fps:5:19: error: whole and split backwards mixed: 0B0 and 1I0\n    5 | F(0, 0)  F(1, 0)  I(1, 0)  W(1, 0)  B(0, 0)\n      |                   ^\n  hint: `prefer written` runs B for every backward, or I and W for every one"},
    {"greedy_written_without_actions", "devices 2\nmicrobatches 1\nstages 2\ngreedy { prefer written }\n",
     "bad.fps:4:1: error: `prefer written` reorders the program's lists, but the program writes no actions\n    4 | greedy { prefer written }\n      | ^\n  hint: write each device's actions in priority order, or list the kinds to prefer"},
    {"greedy_written_not_alone", "devices 2\nmicrobatches 1\nstages 2\ngreedy { prefer F, written }\nF(0, 0)\n",
     "bad.fps:4:20: error: `prefer written` stands alone: the written lists are the whole priority\n    4 | greedy { prefer F, written }\n      |                    ^"},
    {"greedy_stalls", "devices 2\nmicrobatches 2\nstages 2\ngreedy { prefer B, F\n inflight 0 }\n",
     "bad.fps:4:1: error: the greedy policy stalls: no device can start an action (8 actions left); device 0 has 0 micro-batches in flight, its `inflight` limit\n    4 | greedy { prefer B, F\n      | ^"},
    {"placement_list_length", "devices 2\nmicrobatches 2\nstages 3 placed [0, 1]\n",
     "bad.fps:3:17: error: the placement lists 2 devices for 3 stages\n    3 | stages 3 placed [0, 1]\n      |                 ^"},
    {"placement_device_out_of_range", "devices 2\nmicrobatches 2\nstages 2 placed s + 1\n",
     "bad.fps:3:17: error: device 2 is out of range: the program has 2 devices (0..1)\n    3 | stages 2 placed s + 1\n      |                 ^"},
    {"op_lowercase", "devices 2\nmicrobatches 2\nstages 2\nop offload { duration 1 }\n",
     "bad.fps:4:4: error: operation name 'offload' must be upper case\n    4 | op offload { duration 1 }\n      |    ^\n  hint: letters A-Z, digits and '_', e.g. OFFLOAD_KV"},
    {"op_bad_dependency", "devices 2\nmicrobatches 2\nstages 2\nop SAVE { after FOO }\n",
     "bad.fps:4:17: error: a dependency names a built-in action kind, not 'FOO'\n    4 | op SAVE { after FOO }\n      |                 ^\n  hint: F B I W R OFFLOAD RELOAD OPT SEND_F RECV_F SEND_B RECV_B"},
    {"unknown_define", "param p = 2\ndevices 2\nmicrobatches 2\nstages 2\n",
     "bad.fps: error: unknown parameter 'q' set from outside (parameters: p)"},
    {"array_as_value", "devices 2\nmicrobatches 2\nstages 2\nlet a = array(2)\nF(0, a)\n",
     "bad.fps:5:6: error: 'a' is an array, not a value\n    5 | F(0, a)\n      |      ^\n  hint: read one element, a[i]; copy it whole with `let other = a`"},
    {"index_not_array", "devices 2\nmicrobatches 2\nstages 2\nlet a = 1\nF(0, a[0])\na[1] = 2\n",
     "bad.fps:5:6: error: 'a' is not an array\n    5 | F(0, a[0])\n      |      ^\n  hint: declare an array with `let a = array(n)`\nbad.fps:6:1: error: 'a' is not an array\n    6 | a[1] = 2\n      | ^\n  hint: declare an array with `let a = array(n)`"},
    {"array_outside_let", "devices 2\nmicrobatches 2\nstages 2\nF(0, array(2))\n",
     "bad.fps:4:6: error: array(n) makes a whole array: it is only the value of a `let` or of an assignment\n    4 | F(0, array(2))\n      |      ^\n  hint: e.g. let a = array(p), then a[i] = 1"},
    {"array_assigned_integer", "devices 2\nmicrobatches 2\nstages 2\nlet a = array(2)\na = 3\na += array(2)\n",
     "bad.fps:5:5: error: 'a' is an array: assign it a whole array or set one element\n    5 | a = 3\n      |     ^\n  hint: a = array(n), a = other_array, or a[i] = value\nbad.fps:6:1: error: 'a' is an array: += and -= change one element\n    6 | a += array(2)\n      | ^\n  hint: write a[i] += value"},
    {"array_index_out_of_range", "devices 2\nmicrobatches 2\nstages 2\nlet a = array(2)\nF(0, a[1 + 1])\n",
     "bad.fps:5:8: error: index 2 is out of range: 'a' has 2 elements (0..1)\n    5 | F(0, a[1 + 1])\n      |        ^"},
    {"array_too_large", "devices 2\nmicrobatches 2\nstages 2\nlet a = array(0 - 1)\n",
     "bad.fps:4:15: error: an array has 0 to 67108864 elements (got -1)\n    4 | let a = array(0 - 1)\n      |               ^"},
    {"declare_after_action", "devices 2\nmicrobatches 2\nstages 2\nF(0, 0)\npipelines 1 route 0\n",
     "bad.fps:5:1: error: 'pipelines' comes after the first action\n    5 | pipelines 1 route 0\n      | ^\n  hint: declare devices, microbatches, stages, pipelines and ops before any action"},
};

class GoldenTest : public ::testing::TestWithParam<Golden> {};

TEST_P(GoldenTest, ExactMessage) {
  const Golden& g = GetParam();
  const std::map<std::string, int64_t> defines = std::string(g.name) == "unknown_define"
                                                     ? std::map<std::string, int64_t>{{"q", 1}}
                                                     : std::map<std::string, int64_t>{};
  EXPECT_EQ(compile_error(g.program, defines), g.message);
}

INSTANTIATE_TEST_SUITE_P(Diagnostics, GoldenTest, ::testing::ValuesIn(kGolden),
                         [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace flexpipe

namespace flexpipe {
namespace {

constexpr const char* kSmallProgram = "devices 2\nmicrobatches 2\nstages 2\nfor m in 0..2 { F(0, m)\nF(1, m) }\n";

TEST(Diagnostics, AByteOrderMarkBeforeTheProgramIsNoPartOfIt) {
  const CompiledProgram plain = compile_program(kSmallProgram, "small.fps");
  const CompiledProgram marked = compile_program(std::string("\xEF\xBB\xBF") + kSmallProgram, "small.fps");
  EXPECT_EQ(marked.schedule, plain.schedule);
  // Columns on the first line count from after the mark.
  EXPECT_EQ(compile_error("\xEF\xBB\xBF"
                          "devices 2 3\n"),
            compile_error("devices 2 3\n"));
}

TEST(Diagnostics, ManyErrorsArePrintedUpToACapAndTheRestCounted) {
  std::string program = "devices 2\nmicrobatches 2\nstages 2\nlet x = 1\n";
  for (int i = 0; i < 200; ++i) program += "let x = 1\n";
  const std::string message = compile_error(program);
  size_t errors = 0;
  for (size_t at = message.find(": error: "); at != std::string::npos; at = message.find(": error: ", at + 1)) ++errors;
  EXPECT_EQ(errors, kMaxPrintedErrors);
  EXPECT_TRUE(message.ends_with("\nbad.fps: ... and 150 more errors not shown"))
      << message.substr(message.size() - 200);
}

TEST(Diagnostics, ControlBytesAndNulInTheSourceAreShownEscapedAndKeepTheCaretInPlace) {
  constexpr char kText[] = "devices 2\nmicrobatches 2\nstages 2\nF(0, 0) \x01\0 F(1, 0)\n";
  const std::string program(kText, sizeof kText - 1);
  EXPECT_EQ(compile_error(program),
            "bad.fps:4:9: error: unexpected byte 0x01\n    4 | F(0, 0) \\x01\\x00 F(1, 0)\n      |         ^\n"
            "bad.fps:4:10: error: unexpected byte 0x00\n    4 | F(0, 0) \\x01\\x00 F(1, 0)\n      |             ^");
}

// A chain `0+0+...` is as deep a tree as it is long, and the checker, the interpreter and the writer
// recurse once per level: 21 thousand terms overflowed the stack. One term per line, so that the
// error names the line where the limit is passed.
TEST(Diagnostics, AnExpressionDeeperThanTheLimitIsOneErrorNotAStackOverflow) {
  for (const char* term : {"+0", "*1", "-0"}) {
    std::string program = "devices 2\nmicrobatches 2\nstages 2\nlet w = 0";
    for (int i = 0; i < 21'000; ++i) program += std::string("\n") + term;
    EXPECT_EQ(compile_error(program + "\n"),
              fmt::format("bad.fps:1004:1: error: the expression is deeper than 1000 levels\n 1004 | {}\n      | ^\n"
                          "  hint: each operator adds a level: split it with let (let a = ...; let b = a + ...)",
                          term));
  }
  // At the limit, a chain compiles, and its value is exact.
  std::string deepest = "devices 1\nmicrobatches 1\nstages 1\nlet w = 0";
  for (int i = 0; i < 999; ++i) deepest += " + 1";
  EXPECT_EQ(compile_program(deepest + "\nF(w - 999, 0)\n", "deep.fps").schedule.device_actions[0].size(), 1u);
}

TEST(Diagnostics, ParenthesesNestedBeyondTheLimitAreOneError) {
  const std::string program =
      "devices 2\nmicrobatches 2\nstages 2\nlet w = " + std::string(100'000, '(') + "0" + std::string(100'000, ')');
  const std::string error = compile_error(program + "\n");
  EXPECT_EQ(error.substr(0, error.find('\n')), "bad.fps:4:73: error: nesting deeper than 64 levels");
  EXPECT_TRUE(error.ends_with("\n  hint: split the program into patterns")) << error;
  EXPECT_EQ(error.find("error:", 20), std::string::npos) << error;
}

// A string that is not UTF-8 text is refused where it stands (it reached the schedule's JSON writer,
// which stopped with an internal error), quoted with its bytes escaped as the source line shows them.
TEST(Diagnostics, AStringThatIsNotUtf8IsOneErrorShownEscaped) {
  EXPECT_EQ(compile_error("name \"bad\xFF\"\ndevices 1\nmicrobatches 1\nstages 1\nF(0, 0)\nB(0, 0)\n"),
            "bad.fps:1:6: error: a string holds bytes that are not UTF-8 text: \"bad\\xFF\"\n    1 | name "
            "\"bad\\xFF\"\n      |      ^\n  hint: write strings in UTF-8, without control characters");
  EXPECT_EQ(compile_error("param p = 1 where p >= 2 \"needs \xC3 two\"\ndevices p\nmicrobatches 1\nstages p\n"),
            "bad.fps:1:26: error: a string holds bytes that are not UTF-8 text: \"needs \\xC3 two\"\n    1 | param p = "
            "1 where p >= 2 \"needs \\xC3 two\"\n      |                          ^\n  hint: write strings in UTF-8, "
            "without control characters");
  // UTF-8 itself is text.
  EXPECT_EQ(compile_program("name \"r\xC3\xA9sum\xC3\xA9\"\ndevices 1\nmicrobatches 1\nstages 1\nF(0, 0)\nB(0, 0)\n",
                            "utf8.fps")
                .schedule.name,
            "r\xC3\xA9sum\xC3\xA9");
}

// Patterns cannot call themselves, but each may call the one before it: 30 thousand such calls
// overflowed the interpreter's stack.
TEST(Diagnostics, PatternsCallingPatternsBeyondTheLimitAreOneError) {
  auto chain = [](int patterns) {
    std::string program = "devices 1\nmicrobatches 1\nstages 1\npattern p0() { F(0, 0)\nB(0, 0) }\n";
    for (int i = 1; i < patterns; ++i) program += fmt::format("pattern p{}() {{ p{}() }}\n", i, i - 1);
    return program + fmt::format("p{}()\n", patterns - 1);
  };
  EXPECT_EQ(
      compile_error(chain(30'000)),
      "bad.fps:29749:20: error: patterns call patterns more than 256 deep\n29749 | pattern p29744() { p29743() }\n"
      "      |                    ^\n  hint: call the inner patterns side by side, not each from the one after it");
  EXPECT_EQ(compile_program(chain(256), "chain.fps").schedule.device_actions[0].size(), 2u);
  // Fewer calls that each open 20 blocks reach as deep: the blocks open at once are bounded too.
  std::string nested = "devices 1\nmicrobatches 1\nstages 1\npattern p0() { F(0, 0)\nB(0, 0) }\n";
  for (int i = 1; i < 100; ++i) {
    nested += fmt::format("pattern p{}() {{ ", i);
    for (int b = 0; b < 20; ++b) nested += "if 1 { ";
    nested += fmt::format("p{}()", i - 1);
    for (int b = 0; b < 20; ++b) nested += " }";
    nested += " }\n";
  }
  const std::string error = compile_error(nested + "p99()\n");
  EXPECT_EQ(error.substr(0, error.find('\n')),
            "bad.fps:56:157: error: pattern calls open more than 1024 blocks at once");
  EXPECT_TRUE(error.ends_with("\n  hint: call the inner patterns side by side, or nest fewer blocks around each call"))
      << error;
}

}  // namespace
}  // namespace flexpipe
