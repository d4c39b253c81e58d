// A rank checkpoint's file layout, without torch, so that its reader is tested and fuzzed with the
// other readers (the runtime turns the records into tensors: src/runtime/checkpoint.cpp).
//
// Layout: a first line "flexpipe-checkpoint 1", a second line of JSON (step, optimizer steps, the
// run's identity, and per tensor its name, dtype, shape, byte offset and length, plus a checksum
// (flexpipe/support/checksum.h) of all data), then the raw little-endian tensor bytes.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace flexpipe {

struct CheckpointTensorRecord {
  std::string name;
  std::string dtype;  // float32, float64, int64
  std::vector<int64_t> shape;
  size_t offset = 0;  // into CheckpointFile::data
  size_t bytes = 0;
  friend bool operator==(const CheckpointTensorRecord&, const CheckpointTensorRecord&) = default;
};

struct CheckpointFile {
  int step = 0;  // the next step to run
  int optimizer_steps = 0;
  nlohmann::json identity;  // what must match to resume: model, schedule, seed, devices, replicas
  std::vector<CheckpointTensorRecord> tensors;
  std::string data;  // every tensor's bytes
  friend bool operator==(const CheckpointFile&, const CheckpointFile&) = default;
};

// Bytes per element of a dtype the checkpoint stores; throws Error naming `origin` for another.
size_t checkpoint_element_size(const std::string& dtype, const std::string& origin);

// Reads a whole file's bytes. Throws Error naming `origin` (and line 2 for the header) for a wrong
// first line, a malformed header, a checksum mismatch, or a tensor whose shape, dtype, offset and
// length do not agree with each other and with the data: every record is checked before anything is
// allocated for it.
CheckpointFile parse_checkpoint_file(const std::string& bytes, const std::string& origin);

// The file's bytes, with the checksum of `file.data`.
std::string checkpoint_file_bytes(const CheckpointFile& file);

}  // namespace flexpipe
