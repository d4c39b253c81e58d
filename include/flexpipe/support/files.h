// Whole-file reads and atomic writes, with errors that name the file.
#pragma once
#include <cstddef>
#include <string>

namespace flexpipe {

// The most any reader takes in: every input is read whole, so this bounds the memory a file can cost
// before it is parsed. The largest real inputs are cost graphs: 200 k operators (bench/chain_graph.py)
// are 119 MB, so 1 GiB holds graphs of about 1.8 M operators.
inline constexpr size_t kInputFileLimit = size_t{1} << 30;

// Throws Error "PATH: cannot read: REASON": a missing or unreadable file; one that is not a regular
// file ("is a FIFO, not a regular file"), refused before anything is read, so that a FIFO or a device
// cannot hang or exhaust the reader; one of more than `limit` bytes.
std::string read_text_file(const std::string& path, size_t limit = kInputFileLimit);
// Why `path` is no file to read, for a path that is checked before it is read: "no such file", "is a
// FIFO, not a regular file", the system's reason; empty for a regular file.
std::string why_not_a_regular_file(const std::string& path);
void write_text_file(const std::string& path, const std::string& text);  // atomic: temp file, rename

}  // namespace flexpipe
