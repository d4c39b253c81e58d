// flexpipe: one binary, one subcommand per job. Exit codes: 0 success, 1 a check that found problems,
// 2 bad input (unknown schedule, malformed file, impossible parameters), 3 an internal error.
#include <cstdio>

#include <fmt/format.h>

#include "flexpipe/support/error.h"
#include "options.h"

int main(int argc, char** argv) {
  CLI::App app{"FlexPipe: write, check, simulate, draw and convert pipeline-parallel training schedules."};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string("flexpipe 0.1.0"));
  int exit_code = 0;
  const std::vector<std::string> command_line(argv, argv + argc);
  flexpipe::cli::add_schedules_command(app, exit_code);
  flexpipe::cli::add_show_command(app, exit_code);
  flexpipe::cli::add_simulate_command(app, exit_code);
  flexpipe::cli::add_check_command(app, exit_code);
  flexpipe::cli::add_convert_command(app, exit_code);
  flexpipe::cli::add_model_command(app, exit_code);
  flexpipe::cli::add_params_command(app, exit_code);
  flexpipe::cli::add_launch_command(app, exit_code);
  flexpipe::cli::add_run_command(app, exit_code);
  flexpipe::cli::add_profile_command(app, exit_code);
  flexpipe::cli::add_partition_command(app, exit_code);
  flexpipe::cli::add_search_command(app, exit_code);
  flexpipe::cli::add_train_command(app, command_line, exit_code);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e);
    return code == 0 ? 0 : 2;
  } catch (const flexpipe::Error& e) {
    fmt::print(stderr, "error: {}\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    fmt::print(stderr, "internal error: {}\n", e.what());
    return 3;
  }
  return exit_code;
}
