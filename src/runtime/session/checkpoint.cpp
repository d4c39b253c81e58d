// Writing and reading each rank's checkpoint file and the `latest` marker that completes a step's save.
#include "session/checkpoint.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <ATen/ATen.h>
#include <fmt/format.h>

#include "flexpipe/interop/schedule_io.h"
#include "flexpipe/support/error.h"
#include "flexpipe/support/files.h"
#include "flexpipe/train/checkpoint_file.h"

namespace flexpipe::runtime {

namespace {

at::ScalarType dtype_named(const std::string& name) {
  if (name == "float32") return at::kFloat;
  if (name == "float64") return at::kDouble;
  return at::kLong;  // the file format knows no other (parse_checkpoint_file checked)
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
  CheckpointFile file{.step = checkpoint.step,
                      .optimizer_steps = checkpoint.optimizer_steps,
                      .identity = checkpoint.identity,
                      .tensors = {},
                      .data = {}};
  for (const auto& [name, tensor] : checkpoint.tensors) {
    const at::Tensor t = tensor.detach().to(at::kCPU).contiguous();
    const size_t bytes = static_cast<size_t>(t.numel()) * t.element_size();
    file.tensors.push_back({.name = name,
                            .dtype = dtype_name(t.scalar_type()),
                            .shape = t.sizes().vec(),
                            .offset = file.data.size(),
                            .bytes = bytes});
    file.data.append(static_cast<const char*>(t.data_ptr()), bytes);
  }
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  write_text_file(path, checkpoint_file_bytes(file));
}

RankCheckpoint read_rank_checkpoint(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(fmt::format("{}: cannot open the checkpoint", path));
  std::stringstream bytes;
  bytes << in.rdbuf();
  const CheckpointFile file = parse_checkpoint_file(bytes.str(), path);
  RankCheckpoint checkpoint{.step = file.step,
                            .optimizer_steps = file.optimizer_steps,
                            .identity = file.identity,
                            .tensors = {}};
  for (const CheckpointTensorRecord& record : file.tensors) {
    at::Tensor t = at::empty(record.shape, at::TensorOptions().dtype(dtype_named(record.dtype)));
    std::memcpy(t.data_ptr(), file.data.data() + record.offset, record.bytes);
    checkpoint.tensors.emplace_back(record.name, t);
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
