// Checkpoints: each rank's named tensors in one file of its own, and a `latest` file naming the last
// complete step. Every file is written to a temporary name, flushed, and renamed into place; `latest`
// moves only after every rank has renamed its file, so a crash during a save leaves the previous
// checkpoint the one `--resume` loads, never a half-written one.
//
// One file per rank, `DIR/step-<K>/rank-<R>.bin`, laid out as include/flexpipe/train/checkpoint_file.h
// says (its torch-free reader is fuzzed).
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>
#include <nlohmann/json.hpp>

namespace flexpipe::runtime {

struct RankCheckpoint {
  int step = 0;  // the next step to run
  int optimizer_steps = 0;
  nlohmann::json identity;  // what must match to resume: model, schedule, seed, devices, replicas
  std::vector<std::pair<std::string, at::Tensor>> tensors;
};

std::string checkpoint_path(const std::string& dir, int step, int rank);
// Writes atomically (temporary file + rename). Throws Error naming the path on failure.
void write_rank_checkpoint(const std::string& path, const RankCheckpoint& checkpoint);
// Throws Error naming the file for a bad magic line, malformed header, short file or checksum mismatch.
RankCheckpoint read_rank_checkpoint(const std::string& path);

// `DIR/latest`: the step of the last complete checkpoint; -1 when there is none.
int latest_checkpoint(const std::string& dir);
void mark_latest_checkpoint(const std::string& dir, int step);
// The steps of DIR's step-<K> folders, newest first, complete or not.
std::vector<int> checkpoint_steps(const std::string& dir);

}  // namespace flexpipe::runtime
