// --device: the forms it reads, the one error for the rest, and the GPU each rank of a job takes.
#include "flexpipe/train/device.h"

#include <string>

#include <gtest/gtest.h>

#include "flexpipe/support/error.h"

namespace flexpipe::runtime {
namespace {

TEST(Device, ReadsCpuCudaAndCudaWithAnIndex) {
  EXPECT_EQ(parse_device("cpu"), Device{});
  EXPECT_EQ(parse_device("cuda"), (Device{Device::Kind::Cuda, -1}));
  EXPECT_EQ(parse_device("cuda:0"), (Device{Device::Kind::Cuda, 0}));
  EXPECT_EQ(parse_device("cuda:13"), (Device{Device::Kind::Cuda, 13}));
  for (const char* text : {"cpu", "cuda", "cuda:0", "cuda:13"}) EXPECT_EQ(to_string(parse_device(text)), text);
}

TEST(Device, RefusesAnythingElseWithOneMessage) {
  for (const std::string text :
       {"", "gpu", "CUDA", "cuda:", "cuda:-1", "cuda:1x", "cuda:+1", "cuda:99999999999", "cpu:0", " cuda"}) {
    try {
      parse_device(text);
      ADD_FAILURE() << "accepted '" << text << "'";
    } catch (const Error& e) {
      EXPECT_EQ(std::string(e.what()), "--device '" + text +
                                           "': expected cpu, cuda (each rank the GPU of its LOCAL_RANK) or cuda:N "
                                           "(GPU N, a whole number)");
    }
  }
}

TEST(Device, CudaWithoutAnIndexIsTheGpuOfTheRanksLocalRank) {
  RankEnv env;
  env.rank = 5;
  env.local_rank = 1;
  EXPECT_EQ(rank_device(parse_device("cuda"), env), (Device{Device::Kind::Cuda, 1}));
  // An index: every rank shares that GPU (several ranks on one GPU, for testing).
  EXPECT_EQ(rank_device(parse_device("cuda:0"), env), (Device{Device::Kind::Cuda, 0}));
  EXPECT_EQ(rank_device(parse_device("cpu"), env), Device{});
}

}  // namespace
}  // namespace flexpipe::runtime
