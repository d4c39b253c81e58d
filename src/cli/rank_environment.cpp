// The environment flexpipe launch gives each rank: torchrun's variables, thread limits when ranks share the machine.
#include <string>
#include <utility>
#include <vector>

#include "launcher.h"

namespace flexpipe::cli {

std::vector<std::string> rank_environment(const std::vector<std::string>& base, int rank, int world_size,
                                          const std::string& master_addr, int master_port) {
  const std::vector<std::pair<std::string, std::string>> set = {{"RANK", std::to_string(rank)},
                                                                {"WORLD_SIZE", std::to_string(world_size)},
                                                                {"LOCAL_RANK", std::to_string(rank)},
                                                                {"LOCAL_WORLD_SIZE", std::to_string(world_size)},
                                                                {"MASTER_ADDR", master_addr},
                                                                {"MASTER_PORT", std::to_string(master_port)}};
  // Several ranks on one machine, each with a thread per core, would oversubscribe it (torchrun does the same).
  std::vector<std::pair<std::string, bool>> defaults = {{"OMP_NUM_THREADS", world_size > 1},
                                                        {"OPENBLAS_NUM_THREADS", world_size > 1}};
  std::vector<std::string> env;
  for (const std::string& entry : base) {
    const std::string name = entry.substr(0, entry.find('='));
    bool replaced = false;
    for (const auto& [key, value] : set) replaced |= key == name;
    if (replaced) continue;
    for (auto& [key, wanted] : defaults)
      if (key == name) wanted = false;
    env.push_back(entry);
  }
  for (const auto& [key, value] : set) env.push_back(key + "=" + value);
  for (const auto& [key, wanted] : defaults)
    if (wanted) env.push_back(key + "=1");
  return env;
}

}  // namespace flexpipe::cli
