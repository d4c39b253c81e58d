// A rank checkpoint's file layout: its records written and read back, torch-free.
#include "flexpipe/train/checkpoint_file.h"

#include <limits>

#include <fmt/format.h>

#include "flexpipe/support/checksum.h"
#include "flexpipe/support/error.h"
#include "flexpipe/support/json_nesting.h"

namespace flexpipe {

namespace {

constexpr const char* kMagic = "flexpipe-checkpoint 1";

// The record's bytes as its shape and dtype say, refusing negative extents and any product that
// overflows: a header is untrusted input and the runtime allocates what it says.
void check_record(const CheckpointTensorRecord& record, size_t data_size, const std::string& origin) {
  size_t elements = 1;
  for (const int64_t extent : record.shape) {
    if (extent < 0)
      throw Error(fmt::format("{}: tensor '{}' has a negative extent {}", origin, printable(record.name), extent));
    const auto unsigned_extent = static_cast<size_t>(extent);
    if (unsigned_extent != 0 && elements > std::numeric_limits<size_t>::max() / unsigned_extent)
      throw Error(
          fmt::format("{}: tensor '{}' has more elements than memory can hold", origin, printable(record.name)));
    elements *= unsigned_extent;
  }
  const size_t element = checkpoint_element_size(record.dtype, origin);
  if (elements > std::numeric_limits<size_t>::max() / element || elements * element != record.bytes)
    throw Error(
        fmt::format("{}: tensor '{}' has {} bytes for its shape", origin, printable(record.name), record.bytes));
  if (record.offset > data_size || record.bytes > data_size - record.offset)
    throw Error(fmt::format("{}: tensor data runs past the end of the file", origin));
}

// A header number as an integer of type T: JSON's integers only, in T's range (a float or an
// out-of-range value would otherwise be converted silently, or undefined).
template <typename T>
T whole_number(const nlohmann::json& header, const char* key, const std::string& origin) {
  const nlohmann::json& value = header.at(key);
  if (value.is_number_unsigned()) {
    const uint64_t number = value.get<uint64_t>();
    if (number <= static_cast<uint64_t>(std::numeric_limits<T>::max())) return static_cast<T>(number);
  } else if (value.is_number_integer()) {
    const int64_t number = value.get<int64_t>();
    if (number >= 0 && static_cast<uint64_t>(number) <= static_cast<uint64_t>(std::numeric_limits<T>::max()))
      return static_cast<T>(number);
  }
  throw Error(fmt::format("{}:2: malformed checkpoint header: {} must be a whole number from 0 to {}, got {}", origin,
                          key, std::numeric_limits<T>::max(), printable(value.dump(), 40)));
}

}  // namespace

size_t checkpoint_element_size(const std::string& dtype, const std::string& origin) {
  if (dtype == "float32") return 4;
  if (dtype == "float64" || dtype == "int64") return 8;
  throw Error(fmt::format("{}: unknown tensor dtype '{}'", origin, printable(dtype)));
}

CheckpointFile parse_checkpoint_file(const std::string& bytes, const std::string& origin) {
  const size_t first_end = bytes.find('\n');
  const std::string magic = bytes.substr(0, first_end);
  if (magic != kMagic)
    throw Error(fmt::format("{}: not a FlexPipe checkpoint (first line '{}')", origin, printable(magic)));
  const size_t header_begin = first_end + 1;
  const size_t header_end = bytes.find('\n', header_begin);
  const std::string header_line =
      bytes.substr(header_begin, header_end == std::string::npos ? std::string::npos : header_end - header_begin);
  CheckpointFile file;
  file.data = header_end == std::string::npos ? std::string() : bytes.substr(header_end + 1);
  if (const size_t deep = json_nesting_beyond(header_line); deep != std::string::npos)
    throw Error(fmt::format("{}:2:{}: malformed checkpoint header: arrays and objects nest deeper than {} levels",
                            origin, deep + 1, kMaxJsonNesting));
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(header_line);
  } catch (const std::exception& e) {
    throw Error(fmt::format("{}:2: malformed checkpoint header: {}", origin, printable(e.what(), 200)));
  }
  try {
    if (checksum(file.data) != header.at("checksum").get<std::string>())
      throw Error(fmt::format("{}: checksum mismatch: the file is damaged or was cut short", origin));
    file.step = whole_number<int>(header, "step", origin);
    file.optimizer_steps = whole_number<int>(header, "optimizer_steps", origin);
    file.identity = header.at("identity");
    for (const auto& entry : header.at("tensors")) {
      CheckpointTensorRecord record{.name = entry.at("name").get<std::string>(),
                                    .dtype = entry.at("dtype").get<std::string>(),
                                    .shape = {},
                                    .offset = whole_number<size_t>(entry, "offset", origin),
                                    .bytes = whole_number<size_t>(entry, "bytes", origin)};
      for (const auto& extent : entry.at("shape")) {
        if (!extent.is_number_integer())
          throw Error(
              fmt::format("{}:2: malformed checkpoint header: tensor '{}' has an extent that is not a whole "
                          "number: {}",
                          origin, printable(record.name), printable(extent.dump(), 40)));
        record.shape.push_back(extent.get<int64_t>());
      }
      check_record(record, file.data.size(), origin);
      file.tensors.push_back(std::move(record));
    }
  } catch (const nlohmann::json::exception& e) {
    throw Error(fmt::format("{}:2: malformed checkpoint header: {}", origin, printable(e.what(), 200)));
  }
  return file;
}

std::string checkpoint_file_bytes(const CheckpointFile& file) {
  nlohmann::json header = {{"step", file.step},
                           {"optimizer_steps", file.optimizer_steps},
                           {"identity", file.identity},
                           {"tensors", nlohmann::json::array()}};
  for (const CheckpointTensorRecord& record : file.tensors)
    header["tensors"].push_back({{"name", record.name},
                                 {"dtype", record.dtype},
                                 {"shape", record.shape},
                                 {"offset", record.offset},
                                 {"bytes", record.bytes}});
  header["checksum"] = checksum(file.data);
  return std::string(kMagic) + "\n" + header.dump() + "\n" + file.data;
}

}  // namespace flexpipe
