#include "checkpoint.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <ATen/ATen.h>
#include <fmt/format.h>

#include "flexpipe/interop/schedule_io.h"
#include "flexpipe/support/error.h"
#include "flexpipe/support/files.h"

namespace flexpipe::runtime {

namespace {

constexpr const char* kMagic = "flexpipe-checkpoint 1";

uint64_t fnv1a(const char* data, size_t size, uint64_t hash = 1469598103934665603ULL) {
  for (size_t i = 0; i < size; ++i) {
    hash ^= static_cast<unsigned char>(data[i]);
    hash *= 1099511628211ULL;
  }
  return hash;
}

at::ScalarType dtype_named(const std::string& name, const std::string& path) {
  if (name == "float32") return at::kFloat;
  if (name == "float64") return at::kDouble;
  if (name == "int64") return at::kLong;
  throw Error(fmt::format("{}: unknown tensor dtype '{}'", path, name));
}

std::string dtype_name(at::ScalarType type) {
  switch (type) {
    case at::kFloat: return "float32";
    case at::kDouble: return "float64";
    case at::kLong: return "int64";
    default: throw Error(fmt::format("checkpoint: cannot store tensors of type {}", c10::toString(type)));
  }
}

}  // namespace

std::string checkpoint_path(const std::string& dir, int step, int rank) {
  return fmt::format("{}/step-{:06d}/rank-{}.bin", dir, step, rank);
}

void write_rank_checkpoint(const std::string& path, const RankCheckpoint& checkpoint) {
  nlohmann::json header = {{"step", checkpoint.step},
                           {"optimizer_steps", checkpoint.optimizer_steps},
                           {"identity", checkpoint.identity},
                           {"tensors", nlohmann::json::array()}};
  std::string data;
  for (const auto& [name, tensor] : checkpoint.tensors) {
    const at::Tensor t = tensor.detach().to(at::kCPU).contiguous();
    const size_t bytes = static_cast<size_t>(t.numel()) * t.element_size();
    header["tensors"].push_back({{"name", name},
                                 {"dtype", dtype_name(t.scalar_type())},
                                 {"shape", t.sizes().vec()},
                                 {"offset", data.size()},
                                 {"bytes", bytes}});
    data.append(static_cast<const char*>(t.data_ptr()), bytes);
  }
  header["checksum"] = fmt::format("{:016x}", fnv1a(data.data(), data.size()));
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  write_text_file(path, std::string(kMagic) + "\n" + header.dump() + "\n" + data);
}

RankCheckpoint read_rank_checkpoint(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(fmt::format("{}: cannot open the checkpoint", path));
  std::string magic, header_line;
  std::getline(in, magic);
  if (magic != kMagic)
    throw Error(fmt::format("{}: not a FlexPipe checkpoint (first line '{}')", path, printable(magic)));
  std::getline(in, header_line);
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(header_line);
  } catch (const std::exception& e) {
    throw Error(fmt::format("{}:2: malformed checkpoint header: {}", path, printable(e.what(), 200)));
  }
  std::stringstream rest;
  rest << in.rdbuf();
  const std::string data = rest.str();
  RankCheckpoint checkpoint;
  try {
    if (fmt::format("{:016x}", fnv1a(data.data(), data.size())) != header.at("checksum").get<std::string>())
      throw Error(fmt::format("{}: checksum mismatch: the file is damaged or was cut short", path));
    checkpoint.step = header.at("step").get<int>();
    checkpoint.optimizer_steps = header.at("optimizer_steps").get<int>();
    checkpoint.identity = header.at("identity");
    for (const auto& entry : header.at("tensors")) {
      const auto shape = entry.at("shape").get<std::vector<int64_t>>();
      const size_t offset = entry.at("offset").get<size_t>(), bytes = entry.at("bytes").get<size_t>();
      if (offset + bytes > data.size()) throw Error(fmt::format("{}: tensor data runs past the end of the file", path));
      at::Tensor t =
          at::empty(shape, at::TensorOptions().dtype(dtype_named(entry.at("dtype").get<std::string>(), path)));
      if (static_cast<size_t>(t.numel()) * t.element_size() != bytes)
        throw Error(
            fmt::format("{}: tensor {} has {} bytes for its shape", path, entry.at("name").get<std::string>(), bytes));
      std::memcpy(t.data_ptr(), data.data() + offset, bytes);
      checkpoint.tensors.emplace_back(entry.at("name").get<std::string>(), t);
    }
  } catch (const nlohmann::json::exception& e) {
    throw Error(fmt::format("{}:2: malformed checkpoint header: {}", path, e.what()));
  }
  return checkpoint;
}

int latest_checkpoint(const std::string& dir) {
  const std::string path = dir + "/latest";
  if (!std::filesystem::exists(path)) return -1;
  const std::string text = read_text_file(path);
  size_t used = 0;
  int step = -1;
  try {
    step = std::stoi(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || step < 0) throw Error(fmt::format("{}: expected a step number, found '{}'", path, text));
  return step;
}

std::vector<int> checkpoint_steps(const std::string& dir) {
  std::vector<int> steps;
  std::error_code error;
  for (const auto& entry : std::filesystem::directory_iterator(dir, error)) {
    const std::string name = entry.path().filename().string();
    int step = -1;
    if (name.size() == 11 && name.starts_with("step-") &&
        std::all_of(name.begin() + 5, name.end(), [](char c) { return c >= '0' && c <= '9'; }))
      step = std::stoi(name.substr(5));
    if (step >= 0) steps.push_back(step);
  }
  std::sort(steps.rbegin(), steps.rend());
  return steps;
}

void mark_latest_checkpoint(const std::string& dir, int step) {
  write_text_file(dir + "/latest", fmt::format("{}\n", step));
}

}  // namespace flexpipe::runtime
