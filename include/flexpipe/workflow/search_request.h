// flexpipe search's request and its run: the search problem built from what the command line asks
// (a model or a cost table, devices, batch splits, memory limit, links and topology, families, plans),
// the search's options, and the result.
#pragma once
#include <chrono>
#include <functional>
#include <string>
#include <vector>

#include "flexpipe/search/search.h"
#include "flexpipe/support/quantity.h"
#include "flexpipe/workflow/model_inputs.h"

namespace flexpipe {

struct SearchRequest {
  NamedModel model;
  std::string costs;  // a per-stage cost table instead of --model
  int devices = 0;
  int microbatches = 0;
  int global_batch = 0;
  Quantity memory_limit;    // 0: the hardware's memory (a cost table's: its memory_capacity)
  double time_budget = 10;  // seconds
  int threads = 0;          // 0: every core
  int max_chunks = 4;
  double link_bandwidth = -1;        // bytes per second; -1: the hardware's NVLink
  Quantity link_latency;             // a bare number: in the graph's time unit
  double host_bandwidth = -1;        // bytes per second; -1: the hardware's PCIe
  int devices_per_node = 0;          // 0: one node
  double inter_node_bandwidth = -1;  // bytes per second; -1: the hardware's InfiniBand
  Quantity inter_node_latency;       // a bare number: in the graph's time unit
  bool no_local_search = false;
  bool no_exact = false;
  bool no_partitioner = false;
  std::string families;  // comma-separated; empty: every family
  bool no_recompute = false;
  bool no_offload = false;
  bool no_bidirectional = false;
  std::vector<std::string> plans;  // partition plan files searched as well
};

// What the caller hears while it runs. The budget counts from `start`: reading a large model is part of the wait.
struct SearchHooks {
  std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now();
  std::function<void(const std::string&)> reading;  // before and after reading a model file
  std::function<void(const SearchProgress&, const std::string& time_unit)> progress;  // the graph's time unit
};

// The problem the request describes; throws Error for what does not make one (no -m, a bad family, a
// plan for a shape the search does not try, inter-node links without nodes).
SearchProblem search_problem(const SearchRequest& request, const std::function<void(const std::string&)>& reading);

struct SearchRun {
  SearchProblem problem;
  SearchOptions options;
  SearchResult result;
};
SearchRun run_search(const SearchRequest& request, const SearchHooks& hooks);

}  // namespace flexpipe
