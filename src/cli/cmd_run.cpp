// flexpipe run: train schedules for real, one process per pipeline rank, and check them against a
// single-process run. Everything that can be checked is checked here, before the runtime is loaded
// and before any rank talks to another.
#include <fmt/format.h>

#include "flexpipe/launch/runtime_loader.h"
#include "flexpipe/support/error.h"
#include "number_checks.h"
#include "options.h"

namespace flexpipe::cli {

namespace {

struct RunOptions {
  TrainingCommand command;
  std::string fault;
};

// "RANK:STEP:ACTION[:hang]"
runtime::FaultInjection parse_fault(const std::string& text) {
  runtime::FaultInjection fault;
  int hang = 0;
  char word[8] = {};
  const int fields = std::sscanf(text.c_str(), "%d:%d:%d:%4s", &fault.rank, &fault.step, &fault.action, word);
  if (fields == 4 && std::string(word) == "hang") hang = 1;
  if ((fields != 3 && !(fields == 4 && hang)) || fault.rank < 0 || fault.step < 0 || fault.action < 0)
    throw Error(fmt::format("--fault '{}': expected RANK:STEP:ACTION or RANK:STEP:ACTION:hang", text));
  fault.hang = hang != 0;
  return fault;
}

void run(RunOptions& o, int& exit_code) {
  if (!o.fault.empty()) o.command.request.fault = parse_fault(o.fault);
  prepare_request(o.command);
  exit_code = run_runtime(o.command.request);
}

}  // namespace

void add_run_command(CLI::App& app, int& exit_code) {
  auto* command = app.add_subcommand(
      "run",
      "Train a GPT-style model with schedules for real (libtorch + c10d), one process per rank, and compare "
      "with a single-process run; start N ranks with `flexpipe launch -n N -- flexpipe run ...`");
  auto o = std::make_shared<RunOptions>();
  command
      ->add_option("schedule", o->command.schedules,
                   "Built-in schedule names or files (.fps, .csv, .json); several are trained one after another")
      ->required();
  add_training_options(command, o->command, "the job's ranks / --dp");
  command->add_option("--steps", o->command.request.training.steps, "Training steps [2]")
      ->check(whole_number_at_least(1));
  command->add_option("--data", o->command.request.training.data,
                      "A text file to train on (byte-level tokens: use --vocab 256) [synthetic sequences]");
  command
      ->add_option("--clip", o->command.request.training.max_grad_norm,
                   "Clip gradients by their global norm over all stages; 0: never [0]")
      ->check(non_negative_number());
  command->add_flag("--verify", o->command.request.verify,
                    "Also train the model in one process with autograd and compare losses and parameters");
  command
      ->add_option("--tolerance", o->command.request.tolerance, "Largest relative difference --verify accepts [1e-6]")
      ->check(non_negative_number());
  command->add_option(
      "--fault", o->fault,
      "Testing: rank RANK dies (or hangs, with :hang) at action ACTION of step STEP: RANK:STEP:ACTION[:hang]");
  command->callback([o, &exit_code] { run(*o, exit_code); });
}

}  // namespace flexpipe::cli
