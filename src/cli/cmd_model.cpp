// flexpipe model: the model zoo and cost graphs (list, show, compare, export).
#include <filesystem>
#include <map>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "flexpipe/costs/hardware.h"
#include "flexpipe/costs/hardware_check.h"
#include "flexpipe/costs/model_zoo.h"
#include "flexpipe/costs/stage_aggregation.h"
#include "flexpipe/interop/cost_graph_json.h"
#include "flexpipe/interop/megatron_layout.h"
#include "flexpipe/interop/schedule_io.h"
#include "flexpipe/support/error.h"
#include "flexpipe/support/files.h"
#include "flexpipe/support/quantity.h"
#include "number_checks.h"
#include "options.h"

namespace flexpipe::cli {

namespace {

std::string billions(double count) {
  if (count >= 1e9) return fmt::format("{:.2f}B", count / 1e9);
  return fmt::format("{:.1f}M", count / 1e6);
}

struct ModelShowOptions {
  NamedModel model;
  bool layers = false;
  bool json = false;
};

struct Row {
  std::string name, kind;
  double forward = 0, backward_input = 0, backward_weight = 0, flops = 0, saved = 0, shared = 0, parameters = 0;
  int operators = 0;
};

struct CompareOptions {
  std::string graph;
  std::string hardware;
  double tolerance = 0.2;
  bool json = false;
};

const char* pass_field(Pass pass) {
  switch (pass) {
    case Pass::Forward: return "forward";
    case Pass::BackwardInput: return "backward_input";
    case Pass::BackwardWeight: return "backward_weight";
  }
  return "";
}

void compare_with_hardware(const CompareOptions& o) {
  const CostGraph graph = load_cost_graph(o.graph);
  const HardwareCheck check = check_against_hardware(graph, find_hardware(o.hardware), o.tolerance);
  if (o.json) {
    nlohmann::ordered_json out{{"graph", graph.name},
                               {"hardware", check.hardware},
                               {"efficiency", check.efficiency},
                               {"tolerance", check.tolerance},
                               {"time_unit", graph.time_unit},
                               {"compute_efficiency", check.compute_efficiency},
                               {"memory_efficiency", check.memory_efficiency},
                               {"off", check.off}};
    auto& passes = out["passes"] = nlohmann::ordered_json::array();
    for (const PassComparison& p : check.passes)
      passes.push_back({{"node", p.node},
                        {"pass", pass_field(p.pass)},
                        {"measured", p.measured},
                        {"predicted", p.predicted},
                        {"bound", p.compute_bound ? "compute" : "memory"},
                        {"achieved", p.achieved},
                        {"off", p.off}});
    fmt::print("{}\n", out.dump(2));
    return;
  }
  fmt::print("{} measured against {} at {:g}% of its peak ({}, at the graph's reference shape)\n", graph.name,
             check.hardware, 100 * check.efficiency, graph.time_unit);
  fmt::print("{:<28} {:<15} {:>12} {:>12} {:>8}  {:<7} {:>9}\n", "operator", "pass", "measured", "predicted", "ratio",
             "bound", "of peak");
  for (const PassComparison& p : check.passes)
    fmt::print("{:<28} {:<15} {:>12.6g} {:>12.6g} {:>8.3f}  {:<7} {:>8.2f}%{}\n", p.node, pass_field(p.pass),
               p.measured, p.predicted, p.measured / p.predicted, p.compute_bound ? "compute" : "memory",
               100 * p.achieved, p.off ? "  off" : "");
  fmt::print("{} of {} passes differ from the prediction by more than {:g}% of the measured time\n", check.off,
             check.passes.size(), 100 * check.tolerance);
  const auto fit = [](double efficiency) {
    return efficiency > 0 ? fmt::format("{:.4g}%", 100 * efficiency) : std::string("none");
  };
  fmt::print(
      "efficiency that predicts the measured total: compute-bound passes {}, memory-bound passes {} "
      "(the profile: {:g}%)\n",
      fit(check.compute_efficiency), fit(check.memory_efficiency), 100 * check.efficiency);
}

void show(const ModelShowOptions& o) {
  const CostGraph graph = load_model_graph(o.model);
  const Shape shape = graph.reference;
  std::vector<Row> rows;
  std::map<int, size_t> row_of_layer;
  for (const OperatorNode& node : graph.nodes) {
    Row* row;
    if (o.layers) {
      auto [it, inserted] = row_of_layer.emplace(node.layer, rows.size());
      if (inserted) {
        rows.emplace_back();
        rows.back().name = node.layer == kNoLayer ? "(none)" : graph.layers[node.layer].name;
        rows.back().kind = node.layer == kNoLayer ? "" : layer_role_name(graph.layers[node.layer].role);
      }
      row = &rows[it->second];
    } else {
      rows.push_back({node.name, node.kind});
      row = &rows.back();
    }
    row->forward += node.forward.time;
    row->backward_input += node.backward_input.time;
    row->backward_weight += node.backward_weight.time;
    row->flops += node.forward.flops.at(shape.microbatch_size, shape.seq_len);
    // A layer holds what two of its operators both save once (shared_saved_bytes stay in a layer).
    const double shared = node.shared_saved_bytes.at(shape.microbatch_size, shape.seq_len);
    row->saved += node.saved_bytes.at(shape.microbatch_size, shape.seq_len) - (o.layers ? shared : 0);
    if (!o.layers) row->shared = shared;
    row->parameters += node.parameters;
    ++row->operators;
  }
  if (o.json) {
    nlohmann::ordered_json out;
    out["name"] = graph.name;
    out["parameters"] = total_parameters(graph);
    out["active_parameters"] = total_active_parameters(graph);
    out["operators"] = graph.nodes.size();
    out["edges"] = graph.edges.size();
    out["time_unit"] = graph.time_unit;
    out["reference"] = {{"microbatch_size", shape.microbatch_size}, {"seq_len", shape.seq_len}};
    if (graph.hardware) out["hardware"] = graph.hardware->name;
    auto& list = out[o.layers ? "layers" : "nodes"] = nlohmann::ordered_json::array();
    for (const Row& row : rows) {
      nlohmann::ordered_json entry{{"name", row.name},
                                   {o.layers ? "role" : "kind", row.kind},
                                   {"forward", row.forward},
                                   {"backward_input", row.backward_input},
                                   {"backward_weight", row.backward_weight},
                                   {"forward_flops", row.flops},
                                   {"saved_bytes", row.saved},
                                   {"parameters", row.parameters}};
      if (o.layers) entry["operators"] = row.operators;
      if (row.shared > 0) entry["shared_saved_bytes"] = row.shared;
      list.push_back(entry);
    }
    fmt::print("{}\n", out.dump(2));
    return;
  }
  fmt::print("{}: {} parameters ({} active), {} operators, {} edges; micro-batch {}, sequence {}{}\n", graph.name,
             billions(total_parameters(graph)), billions(total_active_parameters(graph)), graph.nodes.size(),
             graph.edges.size(), shape.microbatch_size, shape.seq_len,
             graph.hardware ? fmt::format(", on {}", graph.hardware->name) : "");
  fmt::print("{:<32} {:<16} {:>10} {:>10} {:>10} {:>12} {:>12} {:>10}\n", o.layers ? "layer" : "operator",
             o.layers ? "role" : "kind", fmt::format("F {}", graph.time_unit), fmt::format("I {}", graph.time_unit),
             fmt::format("W {}", graph.time_unit), "GFLOP (F)", "saved", "params");
  for (const Row& row : rows)
    fmt::print("{:<32} {:<16} {:>10.4f} {:>10.4f} {:>10.4f} {:>12.2f} {:>12} {:>10}\n", row.name, row.kind, row.forward,
               row.backward_input, row.backward_weight, row.flops / 1e9, format_bytes(row.saved),
               billions(row.parameters));
}

}  // namespace

void add_model_command(CLI::App& app, int&) {
  auto* command = app.add_subcommand("model", "The model zoo and cost graphs: list, show, compare, export");
  command->require_subcommand(1);

  auto* list = command->add_subcommand("list", "List the zoo's models with their parameter counts");
  auto list_json = std::make_shared<bool>(false);
  list->add_flag("--json", *list_json,
                 "Print JSON: name, description, parameters, active_parameters, layers, hidden, heads, seq_len");
  list->callback([list_json] {
    nlohmann::ordered_json models = nlohmann::ordered_json::array();
    if (!*list_json) fmt::print("{:<18} {:>10} {:>10}  {}\n", "model", "params", "active", "description");
    for (const ModelConfig& config : model_zoo()) {
      const CostGraph graph = build_model_graph(config, find_hardware("H100-80GB"));
      if (!*list_json) {
        fmt::print("{:<18} {:>10} {:>10}  {}\n", config.name, billions(total_parameters(graph)),
                   billions(total_active_parameters(graph)), config.description);
        continue;
      }
      models.push_back({{"name", config.name},
                        {"description", config.description},
                        {"parameters", total_parameters(graph)},
                        {"active_parameters", total_active_parameters(graph)},
                        {"layers", config.layers + config.encoder_layers},
                        {"hidden", config.hidden},
                        {"heads", config.heads},
                        {"seq_len", config.seq_len}});
    }
    if (*list_json) fmt::print("{}\n", models.dump(2));
  });

  auto* show_command =
      command->add_subcommand("show", "Operators (or layers) with time, FLOPs, saved bytes and parameters");
  auto show_options = std::make_shared<ModelShowOptions>();
  show_command->add_option("model", show_options->model.model, "Zoo name or cost-graph file (.json)")->required();
  show_command->add_flag("--layers", show_options->layers, "One line per layer instead of per operator");
  show_command->add_flag("--json", show_options->json, "Print JSON (with parameters and active_parameters)");
  add_model_shape_options(show_command, show_options->model);
  show_command->callback([show_options] { show(*show_options); });

  auto* compare_command = command->add_subcommand(
      "compare", "A measured cost graph (flexpipe profile) against a hardware profile's prediction, pass by pass");
  auto compare_options = std::make_shared<CompareOptions>();
  compare_command->add_option("graph", compare_options->graph, "Cost-graph file with measured times (.json)")
      ->required();
  compare_command
      ->add_option("--hardware", compare_options->hardware,
                   "The profile to predict with: A100-80GB, H100-80GB or H200-141GB (docs/hardware.md)")
      ->required();
  compare_command
      ->add_option("--tolerance", compare_options->tolerance,
                   "A pass is off when the prediction differs by more than this fraction of its measured time [0.2]")
      ->check(non_negative_number());
  compare_command->add_flag("--json", compare_options->json, "Print JSON: every pass, and the fitted efficiencies");
  compare_command->callback([compare_options] { compare_with_hardware(*compare_options); });

  auto* export_command = command->add_subcommand("export", "Write a zoo model's cost graph (docs/cost-graph.md)");
  auto export_options = std::make_shared<std::pair<NamedModel, std::string>>();
  export_command->add_option("model", export_options->first.model, "Zoo name or cost-graph file")->required();
  export_command->add_option("-o,--output", export_options->second, "Output file (.json)")->required();
  add_model_shape_options(export_command, export_options->first);
  export_command->callback([export_options] {
    write_text_file(export_options->second, cost_graph_to_json(load_model_graph(export_options->first)));
    fmt::print("wrote {}\n", export_options->second);
  });
}

}  // namespace flexpipe::cli
