#include "generators.h"

namespace flexpipe::detail {

void register_1f1b_family(std::vector<BuiltinSchedule>&) {}

}  // namespace flexpipe::detail
