// flexpipe capture FILE.py:FACTORY --input SHAPE ... -o model.graph.json: a user's PyTorch model as an
// operator-level cost graph (docs/capture.md). Tracing and measuring run in the Python package; this
// command is its front door, with the same options as `python3 -m flexpipe capture`.
#include "flexpipe/launch/python_package.h"
#include "number_checks.h"
#include "options.h"

namespace flexpipe::cli {

namespace {
struct CaptureOptions {
  std::string model;
  std::vector<std::string> inputs;
  std::string loss = "none";
  std::string output;
  std::string name;
  int warmup = 2;
  int repeats = 5;
  std::string clock = "wall";
  std::string tracer = "auto";
  bool debug = false;
};
}  // namespace

void add_capture_command(CLI::App& app, int&) {
  auto* command = app.add_subcommand(
      "capture", "Capture a PyTorch model (FILE.py:FACTORY) as an operator-level cost graph, measured on this machine");
  auto o = std::make_shared<CaptureOptions>();
  command->add_option("model", o->model, "FILE.py:FACTORY, a function in FILE.py that returns the nn.Module")
      ->required();
  command
      ->add_option("--input", o->inputs,
                   "[NAME=]SHAPE[:dtype], one per forward argument (8x3x224x224, 8x128:int64), or by name "
                   "(input_ids=8x128:int64); the first dimension is the micro-batch")
      ->required();
  command->add_option("--loss", o->loss, "The loss after the output: cross_entropy, mse or none (the model's own)")
      ->check(CLI::IsMember({"cross_entropy", "mse", "none"}));
  command->add_option("-o,--output", o->output, "The cost graph JSON to write")->required();
  command->add_option("--name", o->name, "The graph's name [the model's class]");
  command->add_option("--warmup", o->warmup, "Untimed runs before each measurement [2]")
      ->check(whole_number_at_least(0));
  command->add_option("--repeats", o->repeats, "Timed runs per measurement; the median is kept [5]")
      ->check(whole_number_at_least(1));
  command
      ->add_option("--clock", o->clock,
                   "wall, or cpu: the measuring thread's CPU time, which other processes on a shared machine do not "
                   "inflate (exact with one intra-op thread)")
      ->check(CLI::IsMember({"wall", "cpu"}));
  command
      ->add_option("--tracer", o->tracer,
                   "fx (torch.fx), export (torch.export), or auto: torch.export for transformers' models and named "
                   "inputs, torch.fx for the others and torch.export where torch.fx cannot trace [auto]")
      ->check(CLI::IsMember({"auto", "fx", "export"}));
  command->add_flag("--debug", o->debug, "On an error, print the Python traceback as well as the error line");
  command->callback([o] {
    std::vector<std::string> arguments = {"capture", o->model};
    for (const std::string& input : o->inputs) arguments.insert(arguments.end(), {"--input", input});
    arguments.insert(arguments.end(),
                     {"--loss", o->loss, "-o", o->output, "--warmup", std::to_string(o->warmup), "--repeats",
                      std::to_string(o->repeats), "--clock", o->clock, "--tracer", o->tracer});
    if (!o->name.empty()) arguments.insert(arguments.end(), {"--name", o->name});
    if (o->debug) arguments.push_back("--debug");
    exec_python_package(arguments);
  });
}

}  // namespace flexpipe::cli
