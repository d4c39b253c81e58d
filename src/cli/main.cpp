// flexpipe: one binary, one subcommand per job. Exit codes: include/flexpipe/support/exit_status.h.
#include <fmt/format.h>

#include "build_commit.h"
#include "flexpipe/support/error.h"
#include "flexpipe/support/exit_status.h"
#include "options.h"
#include "parse_errors.h"

int main(int argc, char** argv) {
  CLI::App app{"FlexPipe: write, check, simulate, draw, search for and train pipeline-parallel training schedules."};
  app.footer(
      "First steps:\n"
      "  flexpipe schedules                              the built-in schedules\n"
      "  flexpipe simulate zb-h1 -p 4 -m 8 --grid        one simulated, as a timeline\n"
      "  flexpipe search --model gpt3-1.3b -p 4 -m 8 --memory-limit 18GB\n"
      "                                                  the fastest schedule that fits\n"
      "Sizes, bandwidths and times take units: 80GiB, 18.1GB, 900GB/s, 5ms. Each subcommand has --help;\n"
      "the README and docs/ say more.");
  app.require_subcommand(1);
  app.set_version_flag("--version", fmt::format("flexpipe {} (commit {}); `flexpipe version` says more",
                                                FLEXPIPE_VERSION, flexpipe::cli::kBuildCommit));
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
  flexpipe::cli::add_capture_command(app, exit_code);
  flexpipe::cli::add_export_command(app, exit_code);
  flexpipe::cli::add_partition_command(app, exit_code);
  flexpipe::cli::add_search_command(app, exit_code);
  flexpipe::cli::add_train_command(app, command_line, exit_code);
  flexpipe::cli::add_version_command(app, exit_code);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help and --version arrive as ParseErrors with code 0, printed by CLI11.
    if (e.get_exit_code() == 0) return app.exit(e);
    return flexpipe::report_error(flexpipe::kExitBadInput,
                                  flexpipe::cli::describe_parse_error(app, e,
                                                                      std::vector<std::string>(argv + 1, argv + argc)));
  } catch (const std::exception& e) {
    const int code = flexpipe::report_exception(e);
    // Not bad input: a bug of ours. The facts a report needs first.
    if (dynamic_cast<const flexpipe::Error*>(&e) == nullptr)
      fmt::print(stderr,
                 "this is a bug in FlexPipe: please report it with the command line and the output of "
                 "`flexpipe version`\n");
    return code;
  }
  return exit_code;
}
