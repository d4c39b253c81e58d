// Reads the torchrun-style variables. Torch-free on purpose: the CLI calls it before it decides
// whether to load the runtime library at all.
#include "flexpipe/train/rank_env.h"

#include <charconv>
#include <cstdlib>
#include <optional>

#include <fmt/format.h>

#include "flexpipe/support/error.h"

namespace flexpipe::runtime {

namespace {

std::optional<std::string> variable(const char* name) {
  const char* value = std::getenv(name);
  if (value == nullptr) return std::nullopt;
  return std::string(value);
}

// Strict: the whole value must be a decimal integer in [low, high]. A stray "4 " or "4x" is more
// likely a launcher bug than something to guess about.
std::optional<int> integer_variable(const char* name, int low, int high) {
  const std::optional<std::string> text = variable(name);
  if (!text) return std::nullopt;
  int value = 0;
  const char* end = text->data() + text->size();
  const auto [stop, status] = std::from_chars(text->data(), end, value);
  if (text->empty() || status != std::errc() || stop != end)
    throw Error(fmt::format("environment variable {}='{}' is not an integer", name, *text));
  if (value < low || value > high)
    throw Error(fmt::format("environment variable {}={} is out of range ({}..{})", name, value, low, high));
  return value;
}

int required_integer(const char* name, int low, int high, int world_size) {
  const std::optional<int> value = integer_variable(name, low, high);
  if (!value)
    throw Error(fmt::format("environment variable {} is missing (required when WORLD_SIZE={})", name, world_size));
  return *value;
}

}  // namespace

RankEnv rank_env_from_environment() {
  constexpr int kMaxInt = 1 << 30;
  RankEnv env;
  const std::optional<int> world_size = integer_variable("WORLD_SIZE", 1, kMaxInt);
  if (world_size) env.world_size = *world_size;

  // A multi-rank job without RANK or MASTER_PORT would have every process guess the same identity
  // or port, and the rendezvous would hang instead of failing, so both are required there.
  const bool multi_rank = env.world_size > 1;
  const int last_rank = env.world_size - 1;
  if (multi_rank) {
    env.rank = required_integer("RANK", 0, last_rank, env.world_size);
    env.master_port = required_integer("MASTER_PORT", 1, 65535, env.world_size);
  } else {
    env.rank = integer_variable("RANK", 0, last_rank).value_or(0);
    env.master_port = integer_variable("MASTER_PORT", 1, 65535).value_or(env.master_port);
  }

  if (const std::optional<std::string> addr = variable("MASTER_ADDR")) {
    if (addr->empty()) throw Error("environment variable MASTER_ADDR is empty");
    env.master_addr = *addr;
  }

  env.local_world_size = integer_variable("LOCAL_WORLD_SIZE", 1, env.world_size).value_or(env.world_size);
  env.local_rank = integer_variable("LOCAL_RANK", 0, env.local_world_size - 1).value_or(env.rank);
  if (env.local_rank >= env.local_world_size)
    throw Error(
        fmt::format("LOCAL_RANK defaults to RANK={}, which is out of range for LOCAL_WORLD_SIZE={}; "
                    "set LOCAL_RANK",
                    env.rank, env.local_world_size));
  return env;
}

}  // namespace flexpipe::runtime
