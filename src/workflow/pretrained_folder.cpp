// --export-weights DIR/: the weights file the ranks write, then the transformers folder made from it.
#include "flexpipe/workflow/pretrained_folder.h"

#include <filesystem>
#include <system_error>

#include <fmt/format.h>

#include "flexpipe/launch/python_package.h"
#include "flexpipe/support/error.h"

namespace flexpipe {

namespace {
constexpr const char* kWeightsFile = "flexpipe-weights.pt";
}  // namespace

void resolve_pretrained_folder(TrainRequest& o) {
  std::string& weights = o.command.request.export_weights;
  if (weights.empty() || (weights.back() != '/' && !std::filesystem::is_directory(weights))) return;
  o.pretrained_dir = weights;
  std::error_code error;
  std::filesystem::create_directories(weights, error);
  if (error) throw Error(fmt::format("--export-weights {}: cannot make the folder: {}", weights, error.message()));
  weights = (std::filesystem::path(weights) / kWeightsFile).string();
  o.command.request.export_weights_quietly = true;
}

int write_pretrained_folder(const TrainRequest& o, int code) {
  if (code != 0 || o.pretrained_dir.empty()) return code;
  const std::string& weights = o.command.request.export_weights;
  const int written =
      run_python_package({"pretrained", o.command.captured_model, "--weights", weights, "-o", o.pretrained_dir});
  if (written == 0) {
    std::error_code ignored;
    std::filesystem::remove(weights, ignored);  // the folder holds the weights now
  }
  return written;
}

}  // namespace flexpipe
