// The environment flexpipe launch gives each rank: torchrun's variables, thread limits when ranks share the machine.
#include <string>
#include <utility>
#include <vector>

#include "flexpipe/launch/launcher.h"

namespace flexpipe {

std::vector<std::string> rank_environment(const std::vector<std::string>& base, const RankPlace& place,
                                          const std::string& master_addr, int master_port) {
  const std::string rank = std::to_string(place.rank()), world_size = std::to_string(place.world_size());
  // torchrun's names and values (1.13 to 2.11 alike) for one role ("default") and no restarts. The agent store is
  // off: nothing but rank 0 hosts the store here, so torch's own env:// init must host it there too.
  const std::vector<std::pair<std::string, std::string>> set = {{"RANK", rank},
                                                                {"WORLD_SIZE", world_size},
                                                                {"LOCAL_RANK", std::to_string(place.local_rank)},
                                                                {"LOCAL_WORLD_SIZE",
                                                                 std::to_string(place.local_world_size)},
                                                                {"GROUP_RANK", std::to_string(place.node_rank)},
                                                                {"GROUP_WORLD_SIZE", std::to_string(place.nodes)},
                                                                {"ROLE_NAME", "default"},
                                                                {"ROLE_RANK", rank},
                                                                {"ROLE_WORLD_SIZE", world_size},
                                                                {"MASTER_ADDR", master_addr},
                                                                {"MASTER_PORT", std::to_string(master_port)},
                                                                {"TORCHELASTIC_RESTART_COUNT", "0"},
                                                                {"TORCHELASTIC_MAX_RESTARTS", "0"},
                                                                {"TORCHELASTIC_RUN_ID", "none"},
                                                                {"TORCHELASTIC_USE_AGENT_STORE", "False"}};
  // Several ranks on one machine, each with a thread per core, would oversubscribe it (torchrun does the same).
  const bool shared = place.local_world_size > 1;
  std::vector<std::pair<std::string, bool>> defaults = {{"OMP_NUM_THREADS", shared}, {"OPENBLAS_NUM_THREADS", shared}};
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

}  // namespace flexpipe
