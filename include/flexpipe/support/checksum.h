// A 64-bit checksum, as 16 hex digits: to notice that bytes changed (a checkpoint's tensors, the inputs
// an export was made from), not to resist tampering. FNV-1a's prime and steps, from the offset
// 1469598103934665603 (FNV's basis is 14695981039346656037): the checkpoints written before this
// was noticed carry it, and still read.
#pragma once
#include <string>
#include <string_view>

namespace flexpipe {

std::string checksum(std::string_view data);

}  // namespace flexpipe
