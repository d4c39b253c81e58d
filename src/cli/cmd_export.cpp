// flexpipe export GRAPH.json --plan PLAN.json -o DIR: a captured model cut at a plan's stage
// boundaries into TorchScript modules with a manifest (docs/export.md). The cutting runs in the
// Python package; this command is its front door, with the same options as `python3 -m flexpipe export`.
#include "flexpipe/launch/python_package.h"
#include "number_checks.h"
#include "options.h"

namespace flexpipe::cli {

namespace {
struct ExportOptions {
  std::string graph;
  std::string plan;
  std::string output;
  std::string dtype;
  bool no_check = false;
  std::string tolerance;  // empty: the check's own, from the dtype and the model's scale
  bool debug = false;
};
}  // namespace

void add_export_command(CLI::App& app, int&) {
  auto* command = app.add_subcommand(
      "export", "Cut a captured model at a partition plan's stage boundaries into TorchScript modules and a manifest");
  auto o = std::make_shared<ExportOptions>();
  command->add_option("graph", o->graph, "A cost graph written by `flexpipe capture`")->required();
  command->add_option("--plan", o->plan, "A partition plan for that graph (`flexpipe partition -o`)")->required();
  command->add_option("-o,--output", o->output, "The directory to write the modules and manifest.json to")->required();
  command->add_option("--dtype", o->dtype, "Convert parameters and inputs to this type [the model's]")
      ->check(CLI::IsMember({"float32", "float64", "float16", "bfloat16"}));
  command->add_flag("--no-check", o->no_check, "Skip running the written modules against the model");
  command
      ->add_option("--export-tolerance", o->tolerance,
                   "The check's largest accepted difference from the model's outputs, relative to the largest "
                   "output [from the data type and the model's scale, docs/export.md]")
      ->check(non_negative_number());
  command->add_flag("--debug", o->debug, "On an error, print the Python traceback as well as the error line");
  command->callback([o] {
    std::vector<std::string> arguments = {"export", o->graph, "--plan", o->plan, "-o", o->output};
    if (!o->dtype.empty()) arguments.insert(arguments.end(), {"--dtype", o->dtype});
    if (o->no_check) arguments.push_back("--no-check");
    if (!o->tolerance.empty()) arguments.insert(arguments.end(), {"--export-tolerance", o->tolerance});
    if (o->debug) arguments.push_back("--debug");
    exec_python_package(arguments);
  });
}

}  // namespace flexpipe::cli
