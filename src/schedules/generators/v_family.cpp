#include "generators.h"

namespace flexpipe::detail {

void register_v_family(std::vector<BuiltinSchedule>& registry) {
  registry.push_back(zb_v_schedule());
  registry.push_back(zb_v_adaptive_schedule());
  registry.push_back(v_half_schedule());
  registry.push_back(v_min_schedule());
  registry.push_back(dualpipev_schedule());
  registry.push_back(dualpipe_schedule());
}

}  // namespace flexpipe::detail
