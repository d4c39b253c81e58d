// Megatron's pipeline layout string: a small recursive-descent parser that keeps, for every expanded
// symbol, the character it came from, so that errors point into the string the user wrote.
#include "flexpipe/interop/megatron_layout.h"

#include <cctype>
#include <cstdint>

#include <fmt/format.h>

#include "flexpipe/support/error.h"

namespace flexpipe {

namespace {

constexpr size_t kMaxSymbols = 1'000'000;
// Each '(' is a level of recursion: a layout needs two or three, and 40 thousand overflowed the stack.
constexpr int kMaxNesting = 100;

struct Symbol {
  char kind;     // 'E', 't', 'm', 'L' or '|'
  int position;  // 1-based character in the layout
};

[[noreturn]] void fail(const std::string& layout, int position, const std::string& message) {
  throw Error(fmt::format("pipeline layout, character {}: {}\n  {}\n  {}^", position, message, layout,
                          std::string(position - 1, ' ')));
}

class LayoutParser {
 public:
  explicit LayoutParser(const std::string& layout) : layout_(layout) {}

  std::vector<Symbol> parse() {
    if (layout_.find_first_not_of(" \t,") == std::string::npos) fail(layout_, 1, "the layout is empty");
    std::vector<Symbol> symbols = sequence();
    if (at_ < layout_.size()) fail(layout_, position(), "')' without a matching '('");
    return symbols;
  }

 private:
  int position() const { return static_cast<int>(at_) + 1; }

  void skip_cosmetics() {
    while (at_ < layout_.size() && (layout_[at_] == ',' || std::isspace(static_cast<unsigned char>(layout_[at_]))))
      ++at_;
  }

  std::vector<Symbol> sequence() {
    std::vector<Symbol> result;
    for (skip_cosmetics(); at_ < layout_.size() && layout_[at_] != ')'; skip_cosmetics()) {
      const int start = position();
      std::vector<Symbol> item = atom();
      skip_cosmetics();
      if (at_ < layout_.size() && layout_[at_] == '*') {
        const int star = position();
        ++at_;
        skip_cosmetics();
        const size_t digits = at_;
        uint64_t count = 0;
        while (at_ < layout_.size() && std::isdigit(static_cast<unsigned char>(layout_[at_])) && count <= kMaxSymbols)
          count = count * 10 + (layout_[at_++] - '0');
        if (at_ == digits) fail(layout_, star, "'*' needs a repeat count after it");
        if (count == 0) fail(layout_, static_cast<int>(digits) + 1, "the repeat count must be at least 1");
        if (count * item.size() > kMaxSymbols)
          fail(layout_, star, fmt::format("the repeat expands past {} symbols", kMaxSymbols));
        std::vector<Symbol> repeated;
        for (uint64_t r = 0; r < count; ++r) repeated.insert(repeated.end(), item.begin(), item.end());
        item = std::move(repeated);
      }
      if (item.empty()) fail(layout_, start, "'()' repeats nothing");
      result.insert(result.end(), item.begin(), item.end());
      if (result.size() > kMaxSymbols)
        fail(layout_, start, fmt::format("the layout expands past {} symbols", kMaxSymbols));
    }
    return result;
  }

  std::vector<Symbol> atom() {
    const char c = layout_[at_];
    const int start = position();
    if (c == 'E' || c == 't' || c == 'm' || c == 'L' || c == '|') {
      ++at_;
      return {{c, start}};
    }
    if (c == '(') {
      if (++depth_ > kMaxNesting)
        fail(layout_, start, fmt::format("parentheses nest deeper than {} levels", kMaxNesting));
      ++at_;
      std::vector<Symbol> inner = sequence();
      if (at_ >= layout_.size()) fail(layout_, start, "'(' is never closed");
      ++at_;  // ')'
      --depth_;
      return inner;
    }
    if (c == '*') fail(layout_, start, "'*' must follow a symbol or a ')'");
    fail(layout_, start,
         fmt::format("unexpected '{}' (expected E, t, m, L, '|', '(', ')', '*' or ',')", std::string(1, c)));
  }

  const std::string& layout_;
  size_t at_ = 0;
  int depth_ = 0;
};

char symbol_of(LayerRole role) {
  switch (role) {
    case LayerRole::Embedding: return 'E';
    case LayerRole::Transformer: return 't';
    case LayerRole::Mtp: return 'm';
    case LayerRole::Loss: return 'L';
    case LayerRole::Other: return '?';
  }
  return '?';
}

const char* describe_symbol(char symbol) {
  switch (symbol) {
    case 'E': return "the embedding";
    case 't': return "a transformer layer";
    case 'm': return "an MTP layer";
    case 'L': return "the loss";
  }
  return "a layer";
}

}  // namespace

std::vector<std::string> parse_megatron_layout(const std::string& layout) {
  std::vector<std::string> stages(1);
  for (const Symbol& symbol : LayoutParser(layout).parse()) {
    if (symbol.kind == '|')
      stages.emplace_back();
    else
      stages.back() += symbol.kind;
  }
  return stages;
}

Partition partition_from_megatron_layout(const CostGraph& graph, const std::string& layout) {
  const std::vector<Symbol> symbols = LayoutParser(layout).parse();
  for (const LayerInfo& layer : graph.layers)
    if (layer.role == LayerRole::Other)
      throw Error(fmt::format("pipeline layout: layer '{}' of '{}' has no layout symbol (role \"other\")", layer.name,
                              graph.name));
  std::vector<int> stage_of_layer(graph.layers.size(), 0);
  Partition partition;
  partition.num_stages = 1;
  size_t next_layer = 0;
  for (const Symbol& symbol : symbols) {
    if (symbol.kind == '|') {
      ++partition.num_stages;
      continue;
    }
    if (next_layer == graph.layers.size())
      fail(layout, symbol.position,
           fmt::format("'{}' is one layer too many: '{}' has {} layers and all are placed", symbol.kind, graph.name,
                       graph.layers.size()));
    const LayerInfo& expected = graph.layers[next_layer];
    if (symbol_of(expected.role) != symbol.kind)
      fail(layout, symbol.position,
           fmt::format("expected '{}' ({}, layer '{}' comes next in '{}'), got '{}'", symbol_of(expected.role),
                       describe_symbol(symbol_of(expected.role)), expected.name, graph.name, symbol.kind));
    stage_of_layer[next_layer++] = partition.num_stages - 1;
  }
  if (next_layer < graph.layers.size()) {
    int missing[4] = {0, 0, 0, 0};
    for (size_t l = next_layer; l < graph.layers.size(); ++l) ++missing[static_cast<int>(graph.layers[l].role)];
    std::string list;
    const char symbols_by_role[] = {'E', 't', 'm', 'L'};
    for (int r = 0; r < 4; ++r)
      if (missing[r] > 0) list += fmt::format("{}{} '{}'", list.empty() ? "" : ", ", missing[r], symbols_by_role[r]);
    fail(layout, static_cast<int>(layout.size()) + 1,
         fmt::format("the layout ends before placing every layer of '{}': {} missing", graph.name, list));
  }
  for (const OperatorNode& node : graph.nodes) {
    if (node.layer == kNoLayer)
      throw Error(fmt::format("pipeline layout: operator '{}' of '{}' has no layer", node.name, graph.name));
    partition.stage_of_node.push_back(stage_of_layer[node.layer]);
  }
  check_partition(graph, partition);
  return partition;
}

}  // namespace flexpipe
