// Tests of the transport registry: backends found by name, the job's transport chosen in one place.
#include <gtest/gtest.h>

#include <chrono>
#include <set>
#include <string>

#include <ATen/ATen.h>

#include "flexpipe/support/error.h"
#include "transport/transport_registry.h"

namespace flexpipe::runtime {
namespace {

using namespace std::chrono_literals;

RankEnv job_of(int world_size) {
  RankEnv env;
  env.world_size = world_size;
  return env;
}

TEST(TransportRegistry, EveryBackendHasOneNameAndAConnectFunction) {
  std::set<std::string_view> names;
  for (const TransportBackend& backend : transport_backends()) {
    EXPECT_TRUE(names.insert(backend.name).second) << backend.name;
    EXPECT_NE(backend.connect, nullptr) << backend.name;
  }
  EXPECT_EQ(names, (std::set<std::string_view>{"gloo", "local"}));
}

TEST(TransportRegistry, ABackendIsFoundByItsName) {
  EXPECT_EQ(transport_backend("gloo").name, "gloo");
  EXPECT_TRUE(transport_backend("gloo").own_threads);
  EXPECT_FALSE(transport_backend("local").own_threads);
}

TEST(TransportRegistry, AnUnknownNameIsAnErrorNamingTheKnownOnes) {
  try {
    transport_backend("nccl");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "unknown transport 'nccl' (known: gloo, local)");
  }
}

TEST(TransportRegistry, AJobOfOneRankTrainsInProcessAndLargerJobsOverGloo) {
  EXPECT_EQ(transport_for(job_of(1)), "local");
  EXPECT_EQ(transport_for(job_of(2)), "gloo");
  EXPECT_EQ(transport_for(job_of(16)), "gloo");
}

TEST(TransportRegistry, TheChosenBackendConnectsATransportReportingItsName) {
  const TransportBackend& backend = transport_backend(transport_for(job_of(1)));
  const std::unique_ptr<Transport> transport = backend.connect(job_of(1), 1s);
  EXPECT_EQ(transport->backend(), backend.name);
  EXPECT_EQ(transport->rank(), 0);
  EXPECT_EQ(transport->world_size(), 1);
  at::Tensor x = at::full({3}, 2.0);
  transport->all_reduce_sum(x, 1s);
  EXPECT_TRUE(at::equal(x, at::full({3}, 2.0)));
}

TEST(TransportRegistry, TheLocalBackendRefusesAJobOfSeveralProcesses) {
  EXPECT_THROW(transport_backend("local").connect(job_of(2), 1s), TransportError);
}

}  // namespace
}  // namespace flexpipe::runtime
