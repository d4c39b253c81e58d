// flexpipe profile: measure a trainable model's operators on this machine and write the measured
// cost graph, which `simulate --model FILE`, the partitioner and `train --schedule auto` read.
#include <fmt/format.h>

#include "flexpipe/launch/launcher.h"
#include "flexpipe/launch/runtime_loader.h"
#include "flexpipe/train/device.h"
#include "flexpipe/train/trainable_model.h"
#include "number_checks.h"
#include "options.h"

namespace flexpipe::cli {

namespace {

struct ProfileOptions {
  ModelSize model{4, 64, 4, 64, 64};
  runtime::ProfileRequest request;
  bool transport = false;
};

}  // namespace

void add_profile_command(CLI::App& app, int& exit_code) {
  auto* command = app.add_subcommand(
      "profile",
      "Measure each operator's F, I and W time and saved bytes on this machine; write the measured cost graph");
  auto o = std::make_shared<ProfileOptions>();
  o->request.microbatch_size = 4;
  command->add_option("--layers", o->model.layers, "Transformer layers [4]")->check(whole_number_at_least(1));
  command->add_option("--hidden", o->model.hidden, "Hidden size [64]")->check(whole_number_at_least(1));
  command->add_option("--heads", o->model.heads, "Attention heads [4]")->check(whole_number_at_least(1));
  command->add_option("--vocab", o->model.vocab, "Vocabulary size [64]")->check(whole_number_at_least(1));
  command->add_option("--seq-len", o->model.seq_len, "Tokens per sequence [64]")->check(whole_number_at_least(1));
  add_model_family_options(command, o->model);
  command->add_option("--microbatch-size", o->request.microbatch_size, "Sequences per micro-batch [4]")
      ->check(whole_number_at_least(1));
  command->add_option("--dtype", o->request.dtype, "float32 or float64 [float32]")
      ->check(CLI::IsMember({"float32", "float64"}));
  command->add_option("--device", o->request.device, kDeviceHelp);
  command->add_option("--warmup", o->request.warmup, "Untimed runs per operator first [2]")
      ->check(whole_number_at_least(0));
  command->add_option("--repeats", o->request.repeats, "Timed runs per operator; the median counts [7]")
      ->check(whole_number_at_least(1));
  command->add_flag("--transport", o->transport,
                    "Also measure the transport between two ranks of this machine (Gloo over loopback: latency, "
                    "bandwidth, each end's host time per message) and store it as the graph's link");
  command->add_option("-o,--output", o->request.output, "Write the measured cost graph (JSON) here");
  command->add_flag("--json", o->request.json, "Print the measured cost graph instead of the table");
  command->callback([o, &exit_code] {
    o->request.model = trainable_config(o->model);
    runtime::parse_device(o->request.device);
    if (o->transport) o->request.transport_port = free_tcp_port();
    exit_code = profile_runtime(o->request);
  });
}

}  // namespace flexpipe::cli
