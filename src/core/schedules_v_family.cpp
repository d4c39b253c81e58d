#include "generators.h"

namespace flexpipe::detail {

void register_v_family(std::vector<BuiltinSchedule>&) {}

}  // namespace flexpipe::detail
