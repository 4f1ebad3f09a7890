// The GPU trainer of layer-list networks (exec/cuda/cuda_network_trainer.cu) against the CPU reference
// (exec/cpu/cpu_network_trainer.cpp): the same starting weights and images give the same loss, gradients, updated
// weights and BatchNorm running statistics within stated tolerances (cuDNN's and our kernels' summation orders
// differ from Eigen's); its allocations are the planner's (exec/activation_accounting.h network_device_layout);
// fp16 with dynamic loss scaling skips a step whose gradients overflow and learns; --deterministic repeats bit for
// bit; the bundled ResNet-101 trains a step; two GPUs equal one under replayed CUDA graphs. Every test skips without
// a GPU (and the two-GPU one below two).
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "core/model_description.h"
#include "exec/activation_accounting.h"
#include "exec/comm/nccl_communicator.h"
#include "exec/cuda/cuda_trainer.h"
#include "exec/trainer.h"
#include "tests/exec/cuda_test_support.cuh"
#include "tests/exec/network_fixtures.h"

namespace zeroplan::exec {
namespace {

using cuda_test::rel_err;

// The worst relative error of any parameter tensor, and its name.
std::pair<double, std::string> worst_tensor(const Trainer& t, const std::vector<float>& got, const std::vector<float>& ref) {
  std::pair<double, std::string> worst{0.0, ""};
  for (const ParamTensor& p : t.layout().tensors()) {
    const double e = rel_err(got, ref, p.offset, p.numel());
    if (e > worst.first) worst = {e, p.name};
  }
  return worst;
}

// Each parameter tensor's values, by name.
std::map<std::string, std::vector<float>> by_tensor(const Trainer& t, const std::vector<float>& flat) {
  std::map<std::string, std::vector<float>> out;
  for (const ParamTensor& p : t.layout().tensors())
    out[p.name].assign(flat.begin() + p.offset, flat.begin() + p.offset + p.numel());
  return out;
}

// Stages 0, 2, 3 and 3 with the optimizer on the CPU, two micro-steps a step: from the second step on the GPU
// replays each micro-step as a CUDA graph with the engine's collectives, stage 3's all-gathers and ZeRO-Offload's
// gradient copies inside it (exec/cuda/step_graphs.cuh), and reruns only the engine's bookkeeping; every step must
// still match the CPU reference, which runs everything eagerly.
TEST(CudaNetworkTrainer, Fp32StepsMatchTheCpuReference) {
  REQUIRE_GPU();
  struct Case {
    int stage;
    bool offload;
  };
  for (const Case k : {Case{0, false}, Case{2, false}, Case{3, false}, Case{3, true}}) {
    const std::string label = "stage " + std::to_string(k.stage) + (k.offload ? " + CPU optimizer" : "");
    ExecConfig c = network_config(small_resnet_with_downsample(16, 16), 8, 1e-3);
    c.grad_accum = 2;  // gradients accumulated over micro-steps as well as written
    c.zero.stage = k.stage;
    c.zero.offload_optimizer = k.offload;
    c.zero.param_persistence_threshold = 0;    // stage 3 gathers every tensor, unit by unit
    c.zero.reduce_bucket_elements = 1000;      // several gradient buckets, reduced as backward finishes them
    auto gpu = make_cuda_trainer(c);
    auto cpu = make_cpu_trainer(c);
    cpu->set_params(gpu->params());  // the same starting point
    for (int step = 0; step < 4; ++step) {
      std::vector<float> images;
      std::vector<std::int32_t> labels;
      random_batch(*c.network, c.grad_accum * c.micro_batch, 100 + step, images, labels);
      const StepResult g = gpu->step_images(images, labels), r = cpu->step_images(images, labels);
      // The first step from equal weights: the loss within 1e-5 relative, every parameter's gradient within 1e-4
      // (relative L2 per tensor). Later steps start from AdamW updates of slightly different gradients.
      const double tolerance = step == 0 ? 1e-5 : 1e-4;
      EXPECT_NEAR(g.loss, r.loss, tolerance * std::abs(r.loss)) << label << ", step " << step;
      EXPECT_NEAR(g.grad_norm, r.grad_norm, 10 * tolerance * r.grad_norm) << label << ", step " << step;
      EXPECT_GT(g.times.backward_s, 0.0) << label << ", step " << step;
      if (step == 0) {
        EXPECT_EQ(g.correct, r.correct) << label;
        const auto [grad_err, grad_name] = worst_tensor(*gpu, gpu->grads(), cpu->grads());
        EXPECT_LT(grad_err, 1e-4) << label << ": " << grad_name;
      }
    }
    const std::vector<float> pg = gpu->params(), pc = cpu->params();
    EXPECT_LT(rel_err(pg, pc, 0, static_cast<std::int64_t>(pc.size())), 1e-4) << label;
    for (const BufferTensor& b : gpu->layout().buffers()) {
      const std::vector<float> g = gpu->buffer(b.name), r = cpu->buffer(b.name);
      EXPECT_LT(rel_err(g, r, 0, static_cast<std::int64_t>(r.size())), 1e-5) << label << ": " << b.name;
    }
  }
}

// Two GPUs, one rank each in its own thread over NCCL, against one GPU taking the two ranks' images as two
// micro-steps: the global batch, and every BatchNorm's batch, are the same, so the losses and parameters agree
// to fp32 rounding (the ranks' gradients are summed by NCCL, the micro-steps' by the backward kernels). From the
// second step every micro-step is a replayed CUDA graph with its reductions and all-gathers inside; a replay whose
// collectives or bookkeeping went wrong would part the runs at once. Skipped below two GPUs.
TEST(CudaNetworkTrainer, TwoGpusEqualOneGpuUnderGraphs) {
  REQUIRE_GPU();
  int gpus = 0;
  CUDA_CHECK(cudaGetDeviceCount(&gpus));
  if (gpus < 2) GTEST_SKIP() << "needs two GPUs; this machine has " << gpus;
  constexpr int kSteps = 4;
  for (const auto [stage, offload] : {std::pair{0, false}, std::pair{2, false}, std::pair{3, false}, std::pair{3, true}}) {
    ExecConfig c = network_config(small_resnet_with_downsample(16, 16), 8, 1e-3);
    c.zero.stage = stage;
    c.zero.offload_optimizer = offload;
    c.zero.param_persistence_threshold = 0;
    c.zero.reduce_bucket_elements = 1000;
    std::vector<std::vector<float>> images(kSteps);
    std::vector<std::vector<std::int32_t>> labels(kSteps);
    for (int s = 0; s < kSteps; ++s) random_batch(*c.network, 2 * c.micro_batch, 300 + s, images[s], labels[s]);
    // One GPU, two micro-steps.
    ExecConfig one = c;
    one.grad_accum = 2;
    CUDA_CHECK(cudaSetDevice(0));
    // Both start from the seed's initialization (by tensor, whatever padding the world size gives the layout).
    auto single = make_cuda_trainer(one);
    std::vector<double> single_loss;
    for (int s = 0; s < kSteps; ++s) single_loss.push_back(single->step_images(images[s], labels[s]).loss);
    const std::map<std::string, std::vector<float>> single_params = by_tensor(*single, single->params());
    // Two GPUs: rank r trains micro-step r's images.
    const std::string id = make_nccl_unique_id_hex();
    std::vector<double> rank_loss[2];
    std::map<std::string, std::vector<float>> rank_params[2];
    std::string failure[2];
    std::vector<std::thread> ranks;
    for (int r = 0; r < 2; ++r)
      ranks.emplace_back([&, r] {
        try {
          CommWatch watch;
          watch.timeout_s = 60;  // a rank that failed leaves its peer waiting: it stops within a minute
          auto comm = make_nccl_communicator(r, 2, r, id, nullptr, watch);
          auto t = make_cuda_trainer(c, comm.get());
          const std::int64_t n = c.micro_batch * c.network->input.elements();
          for (int s = 0; s < kSteps; ++s) {
            const std::vector<float> im(images[s].begin() + r * n, images[s].begin() + (r + 1) * n);
            const std::vector<std::int32_t> lb(labels[s].begin() + r * c.micro_batch,
                                               labels[s].begin() + (r + 1) * c.micro_batch);
            rank_loss[r].push_back(t->step_images(im, lb).loss);
          }
          rank_params[r] = by_tensor(*t, t->params());
        } catch (const std::exception& e) {
          failure[r] = e.what();
        }
      });
    for (std::thread& t : ranks) t.join();
    CUDA_CHECK(cudaSetDevice(0));
    for (int r = 0; r < 2; ++r) {
      const std::string label = "stage " + std::to_string(stage) + (offload ? " + CPU optimizer" : "") + ", rank " +
                                std::to_string(r);
      ASSERT_TRUE(failure[r].empty()) << label << ": " << failure[r];
      ASSERT_EQ(rank_loss[r].size(), single_loss.size());
      for (int s = 0; s < kSteps; ++s)
        EXPECT_NEAR(rank_loss[r][s], single_loss[s], 1e-5 * std::abs(single_loss[s]))
            << label << ", step " << s;
      ASSERT_EQ(rank_params[r].size(), single_params.size());
      for (const auto& [name, values] : single_params)
        EXPECT_LT(rel_err(rank_params[r].at(name), values, 0, static_cast<std::int64_t>(values.size())), 1e-5)
            << label << ", " << name;
    }
  }
}

TEST(CudaNetworkTrainer, EvaluationUsesTheRunningStatistics) {
  REQUIRE_GPU();
  ExecConfig c = network_config(small_resnet_with_downsample(16, 8), 8, 1e-3);
  auto gpu = make_cuda_trainer(c);
  auto cpu = make_cpu_trainer(c);
  cpu->set_params(gpu->params());
  std::vector<float> images;
  std::vector<std::int32_t> labels;
  random_batch(*c.network, c.micro_batch, 5, images, labels);
  gpu->step_images(images, labels);
  cpu->step_images(images, labels);
  std::int64_t right_gpu = 0, right_cpu = 0;
  const double loss_gpu = gpu->evaluate_images(images, labels, right_gpu);
  const double loss_cpu = cpu->evaluate_images(images, labels, right_cpu);
  EXPECT_NEAR(loss_gpu, loss_cpu, 1e-5 * std::abs(loss_cpu));
  EXPECT_EQ(right_gpu, right_cpu);
  // set_buffer reaches the device: zero running variance makes the eval output blow up (rsqrt(eps) scale).
  const std::string name = gpu->layout().buffers().front().name;
  std::vector<float> changed = gpu->buffer(name);
  for (float& v : changed) v *= 0.5f;
  gpu->set_buffer(name, changed);
  EXPECT_EQ(gpu->buffer(name), changed);
}

TEST(CudaNetworkTrainer, AllocatesWhatThePlannerCounts) {
  REQUIRE_GPU();
  for (int stage : {0, 2, 3})
    for (ExecPrecision precision : {ExecPrecision::fp16, ExecPrecision::fp32}) {
      ExecConfig c = network_config(small_resnet_with_downsample(32, 16), 16, 1e-3);
      c.precision = precision;
      c.zero.stage = stage;
      auto gpu = make_cuda_trainer(c);
      std::vector<float> images;
      std::vector<std::int32_t> labels;
      random_batch(*c.network, c.micro_batch, 1, images, labels);
      gpu->step_images(images, labels);
      std::map<std::string, std::int64_t> planned;
      for (const DeviceAllocation& a : device_allocations(c, 1)) planned[a.component] += a.bytes;
      const MemoryReport m = gpu->memory();
      for (const auto& [component, bytes] : m.peak_by_component)
        EXPECT_EQ(bytes, planned[component]) << component << " at stage " << stage << ", " << to_string(precision);
      for (const auto& [component, bytes] : planned)
        EXPECT_EQ(m.component(component), bytes) << component << " at stage " << stage;
    }
}

TEST(CudaNetworkTrainer, Fp16SkipsAnOverflowingStepAndLearns) {
  REQUIRE_GPU();
  ExecConfig c = network_config(small_resnet_with_downsample(16, 16), 16, 2e-3);
  c.precision = ExecPrecision::fp16;
  c.loss_scale.initial_scale_power = 40;  // 2^40: the scaled gradients overflow fp16 (65504)
  c.loss_scale.hysteresis = 1;
  auto gpu = make_cuda_trainer(c);
  std::vector<float> images;
  std::vector<std::int32_t> labels;
  random_batch(*c.network, c.micro_batch, 21, images, labels);
  const std::vector<float> before = gpu->params();
  const StepResult first = gpu->step_images(images, labels);
  EXPECT_TRUE(first.skipped);
  EXPECT_EQ(gpu->params(), before);  // a skipped step changes nothing
  // The scale comes down to where the gradients are finite; then one fixed batch is learnt.
  StepResult last = first;
  int skipped = 1, steps = 1;
  for (; steps < 80; ++steps) {
    last = gpu->step_images(images, labels);
    skipped += last.skipped;
  }
  EXPECT_LT(last.loss_scale, first.loss_scale);
  EXPECT_LT(skipped, 30);
  EXPECT_LT(last.loss, 0.5 * first.loss) << "first " << first.loss << ", last " << last.loss;
  EXPECT_GE(last.correct, c.micro_batch * 3 / 4);
}

TEST(CudaNetworkTrainer, DeterministicRunsRepeatBitForBit) {
  REQUIRE_GPU();
  for (ExecPrecision precision : {ExecPrecision::bf16, ExecPrecision::fp16}) {
    ExecConfig c = network_config(small_resnet_with_downsample(16, 16), 8, 1e-3);
    c.precision = precision;
    c.zero.deterministic = true;
    c.loss_scale.initial_scale_power = 8;
    std::vector<std::vector<float>> params;
    std::vector<std::vector<double>> losses(2);
    for (int run = 0; run < 2; ++run) {
      auto gpu = make_cuda_trainer(c);
      for (int step = 0; step < 3; ++step) {
        std::vector<float> images;
        std::vector<std::int32_t> labels;
        random_batch(*c.network, c.micro_batch, 40 + step, images, labels);
        losses[run].push_back(gpu->step_images(images, labels).loss);
      }
      params.push_back(gpu->params());
    }
    EXPECT_EQ(losses[0], losses[1]) << to_string(precision);
    EXPECT_EQ(params[0], params[1]) << to_string(precision);
  }
}

TEST(CudaNetworkTrainer, BundledResNet101TrainsInFp16) {
  REQUIRE_GPU();
  const ModelDescription model = load_model("resnet101");
  ExecConfig c = network_config(network_of(model), 32, 1e-3);
  c.precision = ExecPrecision::fp16;
  c.zero.stage = 2;
  auto gpu = make_cuda_trainer(c);
  std::vector<float> images;
  std::vector<std::int32_t> labels;
  random_batch(*c.network, c.micro_batch, 8, images, labels);
  StepResult r{};
  for (int step = 0; step < 3; ++step) r = gpu->step_images(images, labels);
  EXPECT_TRUE(std::isfinite(r.loss));
  EXPECT_GT(r.times.step_s, 0.0);
  std::map<std::string, std::int64_t> planned;
  for (const DeviceAllocation& a : device_allocations(c, 1)) planned[a.component] += a.bytes;
  EXPECT_EQ(gpu->memory().component("activations"), planned["activations"]);
}

}  // namespace
}  // namespace zeroplan::exec
