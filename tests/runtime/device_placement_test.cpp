// Training on a device that is not the host: every rank's parameters, activations, gradients and
// optimizer state on it, transfers staged through host memory, and the result equal bit for bit to the
// host's run. The device is a test double (host_backed_device.h) whose kernels are the host's, so any
// difference is a tensor the runtime left behind or moved wrongly, and a host tensor that meets a
// device tensor fails as it would on a GPU.
#include <gtest/gtest.h>

#include <array>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <thread>

#include <ATen/ATen.h>

#include "device/device_placement.h"
#include "executor/executor.h"
#include "flexpipe/interop/cost_graph_json.h"
#include "flexpipe/interop/partition_plan_json.h"
#include "flexpipe/interop/schedule_io.h"
#include "flexpipe/ir/memory_actions.h"
#include "flexpipe/schedules/builtin.h"
#include "flexpipe/schedules/library.h"
#include "flexpipe/support/files.h"
#include "flexpipe/train/trainable_model.h"
#include "host_backed_device.h"
#include "scripted_model/tensor_data.h"
#include "session/profiler.h"

namespace flexpipe::runtime {
namespace {

using test::host_backed_device;

const ModelSize kSize{2, 16, 4, 32, 8};

ModelPlan plan_for(const Partition& partition) {
  return make_model_plan(gpt_config(kSize), partition, 2, at::kDouble, 5);
}
Partition balanced(int chunks) { return partition_balanced(trainable_graph(gpt_config(kSize), 2), chunks); }

struct Trained {
  std::vector<double> losses;                  // per step, as rank 0 reports them
  std::vector<std::vector<at::Tensor>> state;  // per rank: Executor::state(), parameters and moments
  std::vector<int64_t> peak_offloaded;         // per rank, last step
  std::string error;
};

// Micro-batches [first, first + count) of a step of `per_step`.
using Batches = std::function<std::vector<MicroBatchData>(int step, int first, int count, int per_step)>;

// Every rank a thread over the in-process transport, which (as Gloo) carries host tensors only;
// `replicas` copies of the pipeline train data-parallel, each on its share of the micro-batches.
Trained train(const Schedule& schedule, const ModelPlan& plan, c10::Device device, int steps = 2, int replicas = 1,
              const Batches& batches = {}) {
  const int devices = schedule.num_devices, ranks = devices * replicas, m = schedule.num_microbatches;
  auto world = make_local_transports(ranks);
  Trained result;
  result.state.resize(ranks);
  result.peak_offloaded.resize(ranks);
  std::vector<std::string> errors(ranks);
  std::vector<std::thread> threads;
  for (int r = 0; r < ranks; ++r)
    threads.emplace_back([&, r] {
      try {
        const int replica = r / devices;
        std::vector<int> group;
        for (int d = 0; d < devices; ++d) group.push_back(replica * devices + d);
        const std::unique_ptr<Transport> pipeline = make_group_view(*world[r], group);
        ExecutorOptions options;
        options.optimizer = {"adamw", 1e-2, 0.01};
        options.device = device;
        options.timeout = std::chrono::milliseconds(20000);
        options.replicas = replicas;
        options.replica = replica;
        options.world = world[r].get();
        Executor executor(schedule, plan, *pipeline, {}, options);
        for (int step = 0; step < steps; ++step) {
          std::vector<MicroBatchData> mine;
          if (batches) {
            mine = batches(step, replica * m, m, m * replicas);
          } else {
            const std::vector<MicroBatchData> all = make_batch(plan, m * replicas, step);
            mine.assign(all.begin() + replica * m, all.begin() + (replica + 1) * m);
          }
          const StepReport report = executor.run_step(step, mine);
          if (r == 0) result.losses.push_back(report.loss);
          result.peak_offloaded[r] = report.peak_offloaded_bytes;
        }
        for (auto& [name, tensor] : executor.state()) result.state[r].push_back(tensor);
      } catch (const std::exception& e) {
        errors[r] = e.what();
      }
    });
  for (auto& t : threads) t.join();
  for (const std::string& e : errors) result.error += e;
  return result;
}

// The same training on the host and on the device: equal losses and state, bit for bit, and every
// tensor of the state on the device.
void expect_device_run_equals_host_run(const Schedule& schedule, const ModelPlan& plan, int replicas = 1,
                                       const Batches& batches = {}) {
  const Trained host = train(schedule, plan, at::kCPU, 2, replicas, batches);
  const Trained device = train(schedule, plan, host_backed_device(), 2, replicas, batches);
  ASSERT_EQ(host.error, "");
  ASSERT_EQ(device.error, "");
  EXPECT_EQ(device.losses, host.losses);
  EXPECT_EQ(device.peak_offloaded, host.peak_offloaded);
  ASSERT_EQ(device.state.size(), host.state.size());
  for (size_t r = 0; r < host.state.size(); ++r) {
    ASSERT_EQ(device.state[r].size(), host.state[r].size());
    ASSERT_FALSE(host.state[r].empty());
    for (size_t i = 0; i < host.state[r].size(); ++i) {
      EXPECT_EQ(device.state[r][i].device(), host_backed_device()) << "rank " << r << ", tensor " << i;
      EXPECT_TRUE(at::equal(device.state[r][i].cpu(), host.state[r][i])) << "rank " << r << ", tensor " << i;
    }
  }
}

TEST(DevicePlacement, TheTestDeviceFailsWhereAGpuWould) {
  // What makes the tests below able to fail: a host tensor that meets a device tensor throws, and the
  // transports refuse device tensors.
  const at::Tensor on_device = at::ones({2, 2}, at::TensorOptions().device(host_backed_device()));
  EXPECT_FALSE(on_device.is_cpu());
  EXPECT_THROW(at::matmul(on_device, at::ones({2, 2})), c10::Error);
  auto transports = make_local_transports(2);
  try {
    transports[0]->post_send(on_device.view({-1}), 1, 1);
    FAIL() << "the transport took a device tensor";
  } catch (const TransportError& e) {
    EXPECT_STREQ(e.what(), "cannot send tag 1: the tensor must be defined, contiguous and on the CPU");
  }
}

TEST(DevicePlacement, StagingCopiesToTheHostOnlyWhatIsElsewhere) {
  const at::Tensor host = at::arange(6.0);
  EXPECT_TRUE(staged_on_host(host).is_same(host));
  const at::Tensor on_device = host.to(host_backed_device());
  const at::Tensor staged = staged_on_host(on_device);
  EXPECT_TRUE(staged.is_cpu());
  EXPECT_TRUE(at::equal(staged, host));
  // An offload copy is separate memory even from the host; a reload copy is on the device.
  EXPECT_NE(host_copy(host).data_ptr(), host.data_ptr());
  EXPECT_EQ(device_copy(host, host_backed_device()).device(), host_backed_device());
  const std::vector<MicroBatchData> placed =
      placed_on({MicroBatchData{host, host.to(at::kLong), {host}}}, host_backed_device());
  EXPECT_EQ(placed[0].tokens.device(), host_backed_device());
  EXPECT_EQ(placed[0].targets.device(), host_backed_device());
  EXPECT_EQ(placed[0].inputs[0].device(), host_backed_device());
}

TEST(DevicePlacement, OneF1BAcrossTwoRanksIsTheHostsRun) {
  expect_device_run_equals_host_run(make_builtin("1f1b", {2, 4}), plan_for(balanced(2)));
}

TEST(DevicePlacement, InterleavedAndSplitBackwardSchedulesAreTheHostsRun) {
  // zb-v: two chunks per rank handing over locally, split backward (I and W).
  expect_device_run_equals_host_run(compile_builtin("zb-v", {2, 4, 0}).schedule, plan_for(balanced(4)));
}

TEST(DevicePlacement, DualPipeSumsReplicaGradientsThroughTheHost) {
  expect_device_run_equals_host_run(compile_builtin("dualpipe", {2, 4, 0}).schedule, plan_for(balanced(2)));
}

TEST(DevicePlacement, DataParallelReplicasSumGradientsThroughTheHost) {
  expect_device_run_equals_host_run(make_builtin("1f1b", {2, 4}), plan_for(balanced(2)), 2);
}

TEST(DevicePlacement, OffloadParksActivationsOnTheHostAndReloadBringsThemBack) {
  // Recompute with its checkpoints offloaded, and every operator's saved tensors offloaded.
  const Schedule plain = make_builtin("1f1b", {2, 4});
  const ModelPlan plan = plan_for(balanced(2));
  expect_device_run_equals_host_run(add_memory_actions(plain, {1, 1}, {1, 1}), plan);
  const Trained moved = train(add_memory_actions(plain, {0, 0}, {1, 1}), plan, host_backed_device(), 1);
  ASSERT_EQ(moved.error, "");
  EXPECT_GT(moved.peak_offloaded[0], 0);
}

// A captured model cut in two by a plan, exported by `flexpipe export` in float64 into a folder of
// its own, and trained with the plan's recompute and offload on the host and on the device.
class CapturedModel : public ::testing::Test {
 protected:
  void SetUp() override {
#ifdef FLEXPIPE_TORCH_CUDA
    // A captured chunk's backward runs autograd's engine, which, where it accumulates a gradient (a
    // residual, a skip), asks the process's accelerator for the stream of any non-CPU tensor: on a CUDA
    // libtorch (the wheel's 2.11) that is CUDA, so the stand-in device reaches CUDA's runtime, which
    // fails without a driver. The built-in model's device tests (explicit passes) still run; captured
    // models train on the host in python/tests/test_train_captured.py.
    GTEST_SKIP() << "the stand-in device cannot run autograd's accumulation under a CUDA libtorch";
#endif
    dir_ = std::filesystem::temp_directory_path() / ("flexpipe-device-" + std::to_string(::getpid()) + "-" +
                                                     ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  // Runs `command` in `folder` (where a capture record's model file is found), its output in the log.
  void run(const std::string& folder, const std::string& command) {
    const std::string log = (dir_ / "command.log").string();
    const std::string line = "cd " + folder + " && " + FLEXPIPE_BINARY + " " + command + " > " + log + " 2>&1";
    ASSERT_EQ(std::system(line.c_str()), 0) << command << "\n" << read_text_file(log);
  }

  // Stage 0 ends at operator `last`; each stage's decisions as a plan names them. `schedule` runs the
  // two stages (its memory actions are added from the plan).
  void expect_trains_as_on_the_host(const std::string& folder, const std::string& graph_file, const std::string& last,
                                    std::array<std::vector<std::string>, 2> recompute,
                                    std::array<std::vector<std::string>, 2> offload, const Schedule& schedule) {
    const CostGraph graph = load_cost_graph(graph_file);
    int first_stage = 0;
    while (first_stage < static_cast<int>(graph.nodes.size()) && graph.nodes[first_stage].name != last) ++first_stage;
    ++first_stage;
    PartitionPlan cut;
    cut.model = graph_file;
    cut.graph = graph.name;
    cut.graph_operators = static_cast<int>(graph.nodes.size());
    cut.hardware = "H100-80GB";
    cut.schedule = "1f1b";
    cut.devices = 2;
    cut.microbatches = 4;
    cut.stages = {{first_stage, recompute[0], offload[0], false, {}},
                  {cut.graph_operators - first_stage, recompute[1], offload[1], false, {}}};
    const std::string plan_file = (dir_ / "plan.json").string(), export_dir = (dir_ / "export").string();
    write_text_file(plan_file, partition_plan_to_json(cut));
    run(folder, "export " + graph_file + " --plan " + plan_file + " -o " + export_dir + " --dtype float64");
    if (HasFatalFailure()) return;
    const ModelPlan plan = make_scripted_plan(graph, plan_partition(cut, graph, plan_file), export_dir, at::kDouble, 3);
    const TensorData data = TensorData::synthetic(*plan.scripted, 3);
    expect_device_run_equals_host_run(add_memory_actions(schedule, stages_that_recompute(cut, 1),
                                                         stages_that_offload(cut, 1)),
                                      plan, 1, [&](int step, int first, int count, int per_step) {
                                        return data.batch(step, first, count, per_step);
                                      });
  }

  std::filesystem::path dir_;
};

TEST_F(CapturedModel, AUNetRecomputingAndOffloadingTrainsOnTheDeviceAsOnTheHost) {
  // The capture record names the model's file relative to the graph's folder.
  expect_trains_as_on_the_host(FLEXPIPE_TEST_DATA "/captured", FLEXPIPE_TEST_DATA "/captured/tiny_unet.graph.json",
                               "relu_2", {{{"down2", "relu_1"}, {}}}, {{{}, {"up1"}}}, make_builtin("1f1b", {2, 4}));
}

TEST_F(CapturedModel, DropoutIsReplayedByTheRecomputedPieceOnTheDevice) {
  // Chunk 1 resumes the generator from the state chunk 0 hands on with its outputs, and its recomputed
  // piece replays it. One rank holds both chunks: the ranks of these tests are threads of one process,
  // which share the host's one generator, so that two ranks would draw in whichever order they run.
  const std::string graph_file = (dir_ / "dropout.graph.json").string();
  const std::string models = std::string(FLEXPIPE_TEST_DATA) + "/../../python/tests";
  run(models, "capture models.py:transformer_dropout --input 2x6x16 --loss cross_entropy --warmup 0 --repeats 1 -o " +
                  graph_file);
  if (HasFatalFailure()) return;
  expect_trains_as_on_the_host(models, graph_file, "encoder_layers_0_linear1",
                               {{{}, {"relu", "encoder_layers_0_dropout"}}}, {{{}, {}}},
                               compile_builtin("interleaved-1f1b", {1, 4, 2}).schedule);
}

TEST(DevicePlacement, TheProfilerMeasuresOperatorsOnTheDevice) {
  // How long the passes take is bench/'s to say; what the profile holds besides is pinned here.
  const ModelPlan plan = plan_for(balanced(1));
  const CostGraph host = profile_model(plan, {0, 1, at::kCPU});
  const CostGraph device = profile_model(plan, {0, 1, host_backed_device()});
  ASSERT_EQ(device.nodes.size(), host.nodes.size());
  const Shape& at = host.reference;
  for (size_t v = 0; v < host.nodes.size(); ++v) {
    // The host's allocator sees none of a device's allocations: the workspace stays the analytic one.
    EXPECT_EQ(device.nodes[v].workspace_bytes.at(at.microbatch_size, at.seq_len),
              plan.graph.nodes[v].workspace_bytes.at(at.microbatch_size, at.seq_len))
        << host.nodes[v].name;
    // What a forward saves and returns is the same tensors wherever they live.
    EXPECT_EQ(device.nodes[v].saved_bytes.at(at.microbatch_size, at.seq_len),
              host.nodes[v].saved_bytes.at(at.microbatch_size, at.seq_len))
        << host.nodes[v].name;
    EXPECT_EQ(device.nodes[v].output_bytes.at(at.microbatch_size, at.seq_len),
              host.nodes[v].output_bytes.at(at.microbatch_size, at.seq_len))
        << host.nodes[v].name;
  }
}

}  // namespace
}  // namespace flexpipe::runtime
