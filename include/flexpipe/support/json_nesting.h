// How deep a JSON text nests, found by a scan before it is parsed: every reader refuses deeper text,
// since nlohmann's copies, comparisons and dumps recurse once per level and a few hundred thousand
// levels overflow the stack.
#pragma once
#include <cstddef>
#include <string_view>

namespace flexpipe {

// Far beyond any file FlexPipe reads or writes (they nest a handful of levels), and shallow enough
// that a recursive walk of the tree stays within a thread's stack even under AddressSanitizer.
inline constexpr int kMaxJsonNesting = 1000;

// The byte offset of the first '[' or '{' outside a string that opens a level deeper than `limit`,
// or npos when none does. Malformed text is scanned as far as it goes: the parser reports it.
size_t json_nesting_beyond(std::string_view text, int limit = kMaxJsonNesting);

}  // namespace flexpipe
