// Whole-file reads and atomic writes, with errors that name the file.
#pragma once
#include <string>

namespace flexpipe {

std::string read_text_file(const std::string& path);                     // throws Error "PATH: cannot read: REASON"
void write_text_file(const std::string& path, const std::string& text);  // atomic: temp file, rename

}  // namespace flexpipe
