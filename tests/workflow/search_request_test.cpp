// flexpipe search's problem from its request: batch splits from -m or --global-batch, the memory
// limit, families switched off and on, and what does not make a problem.
#include "flexpipe/workflow/search_request.h"

#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "flexpipe/costs/hardware.h"
#include "flexpipe/support/error.h"

namespace flexpipe {
namespace {

SearchRequest zoo_request(int devices) {
  SearchRequest request;
  request.model.model = "gpt3-1.3b";
  request.devices = devices;
  return request;
}

std::string error_of(const SearchRequest& request) {
  try {
    search_problem(request, {});
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(SearchRequest, MicroBatchesGiveOneSplitAndAGlobalBatchEveryWholeOne) {
  SearchRequest request = zoo_request(2);
  request.microbatches = 4;
  request.model.microbatch_size = 2;
  EXPECT_EQ(search_problem(request, {}).batches, (std::vector<BatchSplit>{{4, 2}}));
  request.microbatches = 0;
  request.global_batch = 8;  // from 2 micro-batches (one per device) to 8
  EXPECT_EQ(search_problem(request, {}).batches, (std::vector<BatchSplit>{{2, 4}, {4, 2}, {8, 1}}));
  request.microbatches = 3;
  EXPECT_EQ(error_of(request), "search: --global-batch 8 does not split into 3 micro-batches");
}

TEST(SearchRequest, TheLimitIsTheHardwaresUnlessGiven) {
  SearchRequest request = zoo_request(4);
  request.microbatches = 8;
  EXPECT_EQ(search_problem(request, {}).memory_limit, find_hardware("H100-80GB").memory_bytes);
  request.memory_limit = *parse_quantity("18.1e9", QuantityKind::Size);
  EXPECT_EQ(search_problem(request, {}).memory_limit, 18.1e9);
}

TEST(SearchRequest, FamiliesNameWhatIsSearched) {
  SearchRequest request = zoo_request(2);
  request.microbatches = 4;
  request.families = "loop, v";
  const SearchProblem problem = search_problem(request, {});
  EXPECT_TRUE(problem.single_stage_loop);
  EXPECT_TRUE(problem.v_shape);
  EXPECT_FALSE(problem.bidirectional);
  EXPECT_EQ(problem.max_chunks, 1);  // no interleaved placements
  request.families = "loop,zigzag";
  EXPECT_EQ(error_of(request), "--families: 'zigzag' is not a family; choose from loop, interleaved, v, bidirectional");
}

TEST(SearchRequest, WhatMakesNoProblemIsOneError) {
  EXPECT_EQ(error_of(zoo_request(0)), "search: -p (devices) must be at least 1");
  EXPECT_EQ(error_of(zoo_request(2)), "search: give -m (micro-batches per step) or --global-batch");
  SearchRequest both = zoo_request(2);
  both.costs = "table.json";
  EXPECT_EQ(error_of(both), "search: give --model (a model) or --costs (a cost table)");
  SearchRequest inter_node = zoo_request(2);
  inter_node.microbatches = 4;
  inter_node.inter_node_bandwidth = 1e9;
  EXPECT_EQ(error_of(inter_node),
            "--inter-node-bandwidth and --inter-node-latency need --devices-per-node (which devices share a node)");
}

}  // namespace
}  // namespace flexpipe
