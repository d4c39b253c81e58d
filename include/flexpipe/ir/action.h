// The unit of a schedule: one operation of one device on one (stage, micro-batch).
// Kept small and trivially copyable: simulators and the search walk millions of them.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>

namespace flexpipe {

enum class ActionKind : uint8_t {
  F,        // forward of a stage for one micro-batch
  B,        // full backward (input and weight gradients together)
  I,        // input-gradient half of a split backward
  W,        // weight-gradient half of a split backward
  R,        // recompute of the stage's forward right before its backward
  SendF,    // send a stage's forward output to the next stage
  RecvF,    // receive a stage's forward input from the previous stage
  SendB,    // send a stage's input gradient to the previous stage
  RecvB,    // receive a stage's output gradient from the next stage
  Offload,  // move a micro-batch's saved activations to host memory
  Reload,   // bring them back before the backward
  Opt,      // optimizer step of a stage (micro-batch -1)
  Overlap,  // a forward and a backward run as one unit (DualPipe's F&B)
  Custom,   // a user-declared operation kind, see CustomOpKind
};
inline constexpr int kNumActionKinds = 14;

bool is_compute(ActionKind kind);             // F B I W R Opt Overlap (Custom is decided by its declaration)
bool is_communication(ActionKind kind);       // SendF RecvF SendB RecvB
bool is_backward(ActionKind kind);            // B I
std::string_view kind_name(ActionKind kind);  // "F", "SEND_F", "OFFLOAD", "OVERLAP_F_B", ...

struct Action {
  ActionKind kind = ActionKind::F;
  ActionKind sub_kind = ActionKind::B;  // Overlap: kind of the backward half (B or I)
  uint16_t custom = 0;                  // Custom: index into Schedule::custom_ops
  int32_t stage = -1;                   // global stage id; Overlap: stage of the forward half
  int32_t microbatch = -1;              // -1 for Opt and for stage-wide custom actions
  int32_t stage2 = -1;                  // Overlap: stage of the backward half
  int32_t microbatch2 = -1;             // Overlap: micro-batch of the backward half

  static Action make(ActionKind kind, int stage, int microbatch = -1) {
    Action a;
    a.kind = kind;
    a.stage = stage;
    a.microbatch = microbatch;
    return a;
  }
  static Action overlap(int f_stage, int f_mb, int b_stage, int b_mb, ActionKind b_kind = ActionKind::B) {
    Action a;
    a.kind = ActionKind::Overlap;
    a.sub_kind = b_kind;
    a.stage = f_stage;
    a.microbatch = f_mb;
    a.stage2 = b_stage;
    a.microbatch2 = b_mb;
    return a;
  }
  static Action custom_op(uint16_t op, int stage, int microbatch) {
    Action a = make(ActionKind::Custom, stage, microbatch);
    a.custom = op;
    return a;
  }
  // The two halves of an Overlap action.
  Action forward_half() const { return make(ActionKind::F, stage, microbatch); }
  Action backward_half() const { return make(sub_kind, stage2, microbatch2); }

  friend bool operator==(const Action&, const Action&) = default;
};

// PyTorch's cell form, extended with our kinds: "2F0", "1I3", "3SEND_F1", "0OPT", "1R2",
// "(0F7;7B3)OVERLAP_F_B". Custom actions need their kind's name, hence the Schedule overload.
std::string to_string(const Action& action);

}  // namespace flexpipe
