// flexpipe schedules: the built-in library.
#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "flexpipe/schedules/builtin.h"
#include "options.h"

namespace flexpipe::cli {

void add_schedules_command(CLI::App& app, int&) {
  auto* command = app.add_subcommand("schedules", "List the built-in schedules");
  auto json = std::make_shared<bool>(false);
  command->add_flag("--json", *json, "Print the list as JSON");
  command->callback([json] {
    if (*json) {
      nlohmann::json list = nlohmann::json::array();
      for (const auto& s : builtin_schedules())
        list.push_back({{"name", s.name},
                        {"description", s.description},
                        {"default_chunks", s.default_chunks},
                        {"chunks_adjustable", s.chunks_adjustable}});
      fmt::print("{}\n", list.dump(2));
      return;
    }
    for (const auto& s : builtin_schedules())
      fmt::print("{:<18} v={}{}  {}\n", s.name, s.default_chunks, s.chunks_adjustable ? "+" : " ", s.description);
  });
}

}  // namespace flexpipe::cli
