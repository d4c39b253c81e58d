// make_builtin: a built-in's C++ generator by name, the oracle its program is tested against.
#include <map>

#include <fmt/format.h>

#include "flexpipe/support/error.h"
#include "generators.h"

namespace flexpipe {

Schedule make_builtin(std::string_view name, ScheduleParams params) {
  using Generator = Schedule (*)(const ScheduleParams&);
  static const std::map<std::string, Generator, std::less<>> generators = {
      {"gpipe", schedules::generate_gpipe},
      {"1f1b", schedules::generate_1f1b},
      {"interleaved-1f1b", schedules::generate_interleaved_1f1b},
      {"looped-bfs", schedules::generate_looped_bfs},
      {"zb-h1", schedules::generate_zb_h1},
      {"zb-h2", schedules::generate_zb_h2},
      {"zb-v", schedules::generate_zb_v},
      {"zb-v-adaptive", schedules::generate_zb_v_adaptive},
      {"v-half", schedules::generate_v_half},
      {"v-min", schedules::generate_v_min},
      {"dualpipev", schedules::generate_dualpipev},
      {"dualpipe", schedules::generate_dualpipe},
  };
  const BuiltinSchedule& builtin = resolve_builtin(name, params);
  auto generator = generators.find(builtin.name);
  if (generator == generators.end())
    throw Error(fmt::format("{}: the built-in has a program but no C++ generator to test it against", builtin.name));
  return generator->second(params);
}

}  // namespace flexpipe
