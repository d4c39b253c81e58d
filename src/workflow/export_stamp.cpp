// The stamp of an export: a checksum of what it was made from, written beside it once it succeeded.
#include "flexpipe/workflow/export_stamp.h"

#include <algorithm>
#include <filesystem>
#include <vector>

#include "flexpipe/launch/python_package.h"
#include "flexpipe/support/checksum.h"
#include "flexpipe/support/error.h"
#include "flexpipe/support/files.h"

namespace flexpipe {

namespace {

// Next to the manifest, so that an export copied elsewhere carries it.
std::filesystem::path stamp_path(const std::string& export_dir) {
  return std::filesystem::path(export_dir) / "made-from.checksum";
}

}  // namespace

std::string export_stamp(const std::string& graph_path, const CostGraph& graph, const std::string& plan_path,
                         const std::string& dtype) {
  if (!graph.capture || graph.capture->file.empty()) return "";
  std::vector<std::filesystem::path> package;
  std::error_code error;
  for (const auto& entry : std::filesystem::directory_iterator(python_package_dir() + "/flexpipe", error))
    if (entry.path().extension() == ".py") package.push_back(entry.path());
  if (error || package.empty()) return "";
  std::sort(package.begin(), package.end());
  try {
    std::string inputs = dtype + '\0' + read_text_file(graph_path) + '\0' + read_text_file(plan_path) + '\0' +
                         read_text_file(graph.capture->file);
    for (const std::filesystem::path& file : package) inputs += '\0' + file.filename().string() + read_text_file(file);
    return checksum(inputs);
  } catch (const Error&) {
    return "";  // the export names what it cannot read
  }
}

bool export_is_current(const std::string& export_dir, const std::string& stamp) {
  if (stamp.empty() || !std::filesystem::is_regular_file(std::filesystem::path(export_dir) / "manifest.json"))
    return false;
  try {
    return read_text_file(stamp_path(export_dir).string()) == stamp + "\n";
  } catch (const Error&) {
    return false;
  }
}

void forget_export_stamp(const std::string& export_dir) {
  std::error_code ignored;
  std::filesystem::remove(stamp_path(export_dir), ignored);
}

void write_export_stamp(const std::string& export_dir, const std::string& stamp) {
  if (!stamp.empty()) write_text_file(stamp_path(export_dir).string(), stamp + "\n");
}

}  // namespace flexpipe
