// PyTorch torch.distributed.pipelining's schedule CSV: one row per rank, one cell per action
// ("2F0", "1I3", "3SEND_F1", "(0F7;7B3)OVERLAP_F_B"), an empty cell is idle. Both the compute-only
// and the compute+comms forms; the placement is inferred from the cells.
#pragma once
#include <string>

#include "flexpipe/ir/schedule.h"

namespace flexpipe {

enum class CsvLettering {
  Detect,   // "BW", or W cells without any I, mean the older lettering; else the current one
  Current,  // I = input gradient, B = full backward (PyTorch today)
  Legacy,   // B = input gradient, BW = full backward (older published files)
};

struct CsvReadOptions {
  CsvLettering lettering = CsvLettering::Detect;
};

// Errors name origin:line:column of the bad cell.
Schedule parse_pytorch_csv(const std::string& text, const std::string& origin, const CsvReadOptions& options = {});
Schedule load_pytorch_csv(const std::string& path, const CsvReadOptions& options = {});
// Writes the current lettering, which PyTorch's _load_csv reads. Throws Error for actions PyTorch
// has no cell for (OPT, R, OFFLOAD, RELOAD, custom kinds).
std::string write_pytorch_csv(const Schedule& schedule);

}  // namespace flexpipe
