#include "generators.h"

namespace flexpipe::detail {

void register_1f1b_family(std::vector<BuiltinSchedule>& registry) {
  registry.push_back(gpipe_schedule());
  registry.push_back(one_f_one_b_schedule());
  registry.push_back(interleaved_1f1b_schedule());
  registry.push_back(looped_bfs_schedule());
  registry.push_back(zb_h1_schedule());
  registry.push_back(zb_h2_schedule());
}

}  // namespace flexpipe::detail
