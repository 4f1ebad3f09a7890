// N ranks checked against one rank: every ZeRO stage over MPI (the CPU backend's communicator) must give the
// losses and parameters of a one-rank run over the same global batch (ZeRO-Offload and the parameter offloads
// against their on-device runs: zero_mpi_offload_test.cpp, in the same binary). Run by ctest under mpirun with 2 and 4
// ranks; each rank also trains the one-rank reference itself (the same global batch, A' = world x A
// micro-steps) and compares.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "core/input_error.h"
#include "exec/comm/mpi_communicator.h"
#include "exec/init_rng.h"
#include "exec/offload/nvme_io.h"
#include "exec/data_shard.h"
#include "exec/trainer.h"
#include "exec/zero/zero_buffer_layout.h"
#include "exec/zero/zero_partition.h"
#include "core/cluster_description.h"
#include "core/model_description.h"
#include "core/training_config.h"
#include "sim/comm_model.h"
#include "sim/memory_model.h"
#include "tests/exec/zero_mpi_support.h"

using namespace zeroplan::exec;

namespace zeroplan::exec::mpi_test {

Communicator* world_comm = nullptr;
// --model=llama (ctest runs the binary once per model): the same tests over a Llama-family block (RMSNorm, RoPE,
// SwiGLU, grouped-query attention 4/2, q/k/v biases, untied head, vocabulary 256) instead of GPT-2's.
bool llama_model = false;

std::int64_t vocab() { return llama_model ? 256 : 257; }

ModelShape small_shape() {
  if (!llama_model) return make_shape(257, 64, 3, 2, 32);
  ModelShape s = make_llama_shape(256, 64, 3, 4, 2, 160, 32, 10000.0, 1e-5);
  s.qkv_bias = true;
  return s;
}

ExecConfig small_config(int stage, std::int64_t grad_accum, std::int64_t bucket_elements) {
  ExecConfig c;
  c.shape = small_shape();
  c.micro_batch = 2;
  c.seq_len = 16;
  c.grad_accum = grad_accum;
  c.precision = ExecPrecision::fp32;
  c.optimizer.learning_rate = 3e-3;
  c.optimizer.weight_decay = 0.1;
  c.optimizer.grad_clip = 0.5;  // small enough to clip: the norm must agree across ranks
  c.zero.stage = stage;
  c.zero.reduce_bucket_elements = bucket_elements;
  c.zero.allgather_bucket_elements = bucket_elements;
  c.seed = 21;
  return c;
}

}  // namespace zeroplan::exec::mpi_test

using namespace zeroplan::exec::mpi_test;

namespace {

// A tensor's values out of a flat layout (layouts differ in alignment between world sizes).
std::vector<float> tensor_values(const Trainer& t, const std::vector<float>& flat, const std::string& name) {
  for (const ParamTensor& p : t.layout().tensors())
    if (p.name == name) return std::vector<float>(flat.begin() + p.offset, flat.begin() + p.offset + p.numel());
  ADD_FAILURE() << "no tensor " << name;
  return {};
}

// ||params(ranks) - params(reference)|| / ||params(reference)|| over every tensor, matched by name (the layouts
// differ in alignment between world sizes); infinity (and a failure) when a tensor's sizes differ.
double parameter_relative_error(const Trainer& ranks, const std::vector<float>& pa, const Trainer& reference,
                                const std::vector<float>& pb) {
  double diff = 0, ref = 0;
  for (const ParamTensor& t : reference.layout().tensors()) {
    const auto x = tensor_values(ranks, pa, t.name), y = tensor_values(reference, pb, t.name);
    if (x.size() != y.size()) {
      ADD_FAILURE() << t.name << ": " << x.size() << " values against " << y.size();
      return std::numeric_limits<double>::infinity();
    }
    for (std::size_t i = 0; i < x.size(); ++i) {
      diff += (static_cast<double>(x[i]) - y[i]) * (static_cast<double>(x[i]) - y[i]);
      ref += static_cast<double>(y[i]) * y[i];
    }
  }
  return std::sqrt(diff / ref);
}

// `steps` steps of the N-rank trainer on this rank's share and of the one-rank reference on the whole global batch
// (the same synthetic stream): equal losses (1e-6) and gradient norms (1e-5) at every step.
void train_side_by_side(Trainer& ranks, Trainer& reference, const ExecConfig& many, const ExecConfig& one, int steps) {
  Communicator& comm = *world_comm;
  TokenSource data_many = TokenSource::synthetic(vocab(), 5), data_one = TokenSource::synthetic(vocab(), 5);
  for (int step = 0; step < steps; ++step) {
    const TokenBatch mine = next_rank_share(data_many, many.micro_batch, many.seq_len, many.grad_accum, comm.world(),
                                            comm.rank());
    const TokenBatch all = next_rank_share(data_one, one.micro_batch, one.seq_len, one.grad_accum, 1, 0);
    const StepResult a = ranks.step(mine.inputs, mine.targets);
    const StepResult b = reference.step(all.inputs, all.targets);
    ASSERT_NEAR(a.loss, b.loss, 1e-6 * std::fabs(b.loss)) << "step " << step;
    ASSERT_NEAR(a.grad_norm, b.grad_norm, 1e-5 * b.grad_norm) << "step " << step;
  }
}

struct Case {
  int stage;
  std::int64_t grad_accum;
  std::int64_t bucket_elements;
  bool overlap;
  bool reduce_scatter;
  // stage 3 (the small model's tensors are 64 to 24,576 elements): persistence threshold, prefetch bucket,
  // max live parameters, max reuse distance
  std::int64_t persistence = 300;
  std::int64_t prefetch = 20000;
  std::int64_t max_live = 1000000000;
  std::int64_t reuse = 1000000000;
};

void expect_equal_to_one_rank(const Case& k) {
  Communicator& comm = *world_comm;
  ExecConfig many = small_config(k.stage, k.grad_accum, k.bucket_elements);
  many.zero.overlap_comm = k.overlap;
  many.zero.reduce_scatter = k.reduce_scatter;
  many.zero.param_persistence_threshold = k.persistence;
  many.zero.prefetch_bucket_elements = k.prefetch;
  many.zero.max_live_parameters = k.max_live;
  many.zero.max_reuse_distance = k.reuse;
  ExecConfig one = small_config(0, k.grad_accum * comm.world(), k.bucket_elements);
  auto ranks = make_cpu_trainer(many, &comm);
  auto reference = make_cpu_trainer(one);
  train_side_by_side(*ranks, *reference, many, one, 20);
  if (::testing::Test::HasFatalFailure()) return;
  const auto pa = ranks->params(), pb = reference->params();
  const double err = parameter_relative_error(*ranks, pa, *reference, pb);
  // Two ranks, one micro-step each: the ranks' gradients are summed exactly as the one-rank run accumulates its
  // micro-steps (g0 + g1), so the runs agree bit for bit (measured 0); 1e-6 asserted. With accumulation, or a
  // reduction tree over 4 ranks, the sum is associated differently ((g00+g01) + (g10+g11) against
  // g00+g01+g10+g11): fp32 reassociation, ~1e-7 per gradient element, which AdamW's m/sqrt(v) amplifies on
  // near-zero gradients; measured 2.8e-6 to 4.3e-6 after 20 steps, so 1e-5 there.
  const double tolerance = k.grad_accum == 1 && comm.world() <= 2 ? 1e-6 : 1e-5;
  EXPECT_LT(err, tolerance) << "parameters after 20 steps, stage " << k.stage;
  if (comm.rank() == 0) std::printf("  parameter relative error after 20 steps: %.3g\n", err);
  // every rank holds the same whole parameters (all-gathered from the partitions)
  double checksum = 0;
  for (float x : pa) checksum += x;
  double sum = checksum;
  comm.all_reduce_host(&sum, 1);
  EXPECT_EQ(sum, checksum * comm.world());
}

}  // namespace

// A layer-list network (a small ResNet: conv, BatchNorm, ReLU, max pool, a residual block, global pool, fc) over
// MPI against one rank over the same global batch, 20 steps at each stage with accumulation: each rank's micro-batch
// is one of the one-rank run's micro-steps, so BatchNorm normalises the same samples together.
ExecConfig network_config(int stage, std::int64_t grad_accum) {
  ExecConfig c;
  NetworkShape n;
  n.input = zeroplan::TensorShape{3, 8, 8};
  n.classes = 10;
  auto op = [](zeroplan::LayerOpKind kind, std::string name, std::vector<std::string> in, std::string out) {
    zeroplan::LayerOp o;
    o.kind = kind;
    o.name = std::move(name);
    o.inputs = std::move(in);
    o.output = std::move(out);
    return o;
  };
  auto conv = [&](std::string name, std::string in, std::string out, std::int64_t cin, std::int64_t cout) {
    zeroplan::LayerOp o = op(zeroplan::LayerOpKind::conv2d, std::move(name), {std::move(in)}, std::move(out));
    o.in_channels = cin;
    o.out_channels = cout;
    o.kernel = 3;
    o.padding = 1;
    return o;
  };
  auto bn = [&](std::string name, std::string t) {
    zeroplan::LayerOp o = op(zeroplan::LayerOpKind::batch_norm, std::move(name), {t}, t);
    o.channels = 6;
    return o;
  };
  zeroplan::LayerOp pool = op(zeroplan::LayerOpKind::max_pool2d, "", {"s"}, "p");
  pool.kernel = pool.stride = 2;
  zeroplan::LayerOp fc = op(zeroplan::LayerOpKind::linear, "fc", {"f"}, "logits");
  fc.in_features = 6;
  fc.out_features = 10;
  fc.bias = true;
  n.layer_names = {"stem", "block", "head"};
  n.layers = {{conv("conv1", "input", "s", 3, 6), bn("bn1", "s"), op(zeroplan::LayerOpKind::relu, "", {"s"}, "s"), pool},
              {conv("b.conv1", "p", "a", 6, 6), bn("b.bn1", "a"), op(zeroplan::LayerOpKind::relu, "", {"a"}, "a"),
               conv("b.conv2", "a", "b", 6, 6), bn("b.bn2", "b"), op(zeroplan::LayerOpKind::add, "", {"b", "p"}, "o"),
               op(zeroplan::LayerOpKind::relu, "", {"o"}, "o")},
              {op(zeroplan::LayerOpKind::adaptive_avg_pool2d, "", {"o"}, "g"),
               op(zeroplan::LayerOpKind::flatten, "", {"g"}, "f"), fc}};
  c.network = n;
  c.micro_batch = 4;
  c.grad_accum = grad_accum;
  c.precision = ExecPrecision::fp32;
  c.optimizer.learning_rate = 3e-3;
  c.optimizer.weight_decay = 0.1;
  c.optimizer.grad_clip = 0.5;
  c.zero.stage = stage;
  c.zero.reduce_bucket_elements = 500;  // several buckets
  c.zero.allgather_bucket_elements = 500;
  c.zero.param_persistence_threshold = 10;
  c.zero.prefetch_bucket_elements = 400;
  c.seed = 21;
  return c;
}

void expect_network_equal_to_one_rank(int stage, std::int64_t grad_accum) {
  Communicator& comm = *world_comm;
  const ExecConfig many = network_config(stage, grad_accum);
  const ExecConfig one = network_config(0, grad_accum * comm.world());
  auto ranks = make_cpu_trainer(many, &comm);
  auto reference = make_cpu_trainer(one);
  const std::int64_t sample = many.network->input.elements(), global = one.micro_batch * one.grad_accum;
  const std::int64_t mine = many.micro_batch * many.grad_accum;
  for (int step = 0; step < 20; ++step) {
    std::vector<float> images(static_cast<std::size_t>(global * sample));
    std::vector<std::int32_t> labels(static_cast<std::size_t>(global));
    for (std::size_t i = 0; i < images.size(); ++i) images[i] = hash_uniform(100 + step, i);
    for (std::size_t i = 0; i < labels.size(); ++i) labels[i] = static_cast<std::int32_t>(splitmix64(step * 7919 + i) % 10);
    const std::int64_t first = comm.rank() * mine;
    const std::vector<float> my_images(images.begin() + first * sample, images.begin() + (first + mine) * sample);
    const std::vector<std::int32_t> my_labels(labels.begin() + first, labels.begin() + first + mine);
    const StepResult a = ranks->step_images(my_images, my_labels);
    const StepResult b = reference->step_images(images, labels);
    ASSERT_NEAR(a.loss, b.loss, 1e-6 * std::fabs(b.loss)) << "step " << step;
    ASSERT_NEAR(a.grad_norm, b.grad_norm, 1e-5 * b.grad_norm) << "step " << step;
    ASSERT_EQ(a.correct, b.correct) << "step " << step;
  }
  const auto pa = ranks->params(), pb = reference->params();
  const double err = parameter_relative_error(*ranks, pa, *reference, pb);
  // As for the transformers above: the ranks' sums associate differently from the one-rank accumulation.
  EXPECT_LT(err, comm.world() <= 2 && grad_accum == 1 ? 1e-6 : 1e-5) << "parameters after 20 steps, stage " << stage;
  if (comm.rank() == 0) std::printf("  network parameter relative error after 20 steps, stage %d: %.3g\n", stage, err);
}

TEST(NetworkOverMpi, Stage0EqualsOneRank) { expect_network_equal_to_one_rank(0, 1); }
TEST(NetworkOverMpi, Stage1WithAccumulationEqualsOneRank) { expect_network_equal_to_one_rank(1, 2); }
TEST(NetworkOverMpi, Stage2EqualsOneRank) { expect_network_equal_to_one_rank(2, 1); }
TEST(NetworkOverMpi, Stage3WithAccumulationEqualsOneRank) { expect_network_equal_to_one_rank(3, 2); }
// Without accumulation every layer's buckets (its convolutions' between the persistent BatchNorm tensors) are
// reduce-scattered as one group straight into the gradient partitions (ZeroEngine::reduce_buckets).
TEST(NetworkOverMpi, Stage3EqualsOneRank) { expect_network_equal_to_one_rank(3, 1); }

TEST(ZeroOverMpi, Stage0EqualsOneRank) { expect_equal_to_one_rank({0, 1, 20000, true, true}); }
TEST(ZeroOverMpi, Stage1EqualsOneRank) { expect_equal_to_one_rank({1, 1, 20000, true, true}); }
TEST(ZeroOverMpi, Stage2EqualsOneRank) { expect_equal_to_one_rank({2, 1, 20000, true, true}); }
TEST(ZeroOverMpi, Stage1WithAccumulationEqualsOneRank) { expect_equal_to_one_rank({1, 3, 20000, true, true}); }
TEST(ZeroOverMpi, Stage2WithAccumulationEqualsOneRank) { expect_equal_to_one_rank({2, 3, 20000, true, true}); }
TEST(ZeroOverMpi, Stage2OneLargeBucketNoOverlap) { expect_equal_to_one_rank({2, 2, 1 << 30, false, true}); }
TEST(ZeroOverMpi, Stage2AllReduceInsteadOfReduceScatter) { expect_equal_to_one_rank({2, 2, 5000, true, false}); }

TEST(ZeroOverMpi, Stage3EqualsOneRank) { expect_equal_to_one_rank({3, 1, 20000, true, true}); }
TEST(ZeroOverMpi, Stage3WithAccumulationEqualsOneRank) { expect_equal_to_one_rank({3, 3, 20000, true, true}); }
TEST(ZeroOverMpi, Stage3NothingPersistentNoReuseNoPrefetch) {
  expect_equal_to_one_rank({3, 2, 5000, false, true, 0, 0, 1000000000, 0});
}
TEST(ZeroOverMpi, Stage3EverythingPersistent) {
  expect_equal_to_one_rank({3, 2, 20000, true, true, 1 << 30, 20000, 1000000000, 1000000000});
}
TEST(ZeroOverMpi, Stage3TightLiveBoundAllReduce) {
  expect_equal_to_one_rank({3, 1, 1 << 30, true, false, 100, 1 << 30, 30000, 40000});
}

// LoRA (exec/lora_layout.h): the adapters trained by the ZeRO engine at every stage, the base held by a frozen
// engine (whole at stages 0-2, partitioned and gathered at stage 3), against one rank over the same global batch;
// the base must come out bit for bit as it went in on every rank.
void expect_lora_equal_to_one_rank(int stage, std::int64_t grad_accum, std::int64_t persistence, bool nf4 = false) {
  Communicator& comm = *world_comm;
  auto lora = [&](ExecConfig c) {
    c.lora.enabled = true;
    c.lora.rank = 4;
    c.lora.alpha = 8;
    c.lora.modules = llama_model ? std::vector<std::string>{"self_attn.q_proj", "self_attn.v_proj", "mlp.gate_proj",
                                                            "mlp.down_proj"}
                                 : std::vector<std::string>{"attn.c_attn", "mlp.c_proj"};
    c.lora.quantize_nf4 = nf4;
    c.zero.param_persistence_threshold = persistence;
    c.optimizer.grad_clip = 0.05;  // clips: the norm must agree across ranks
    return c;
  };
  const ExecConfig many = lora(small_config(stage, grad_accum, 2000));
  const ExecConfig one = lora(small_config(0, grad_accum * comm.world(), 2000));
  auto ranks = make_cpu_trainer(many, &comm);
  auto reference = make_cpu_trainer(one);
  const std::vector<float> base0 = ranks->frozen_params();
  ASSERT_FALSE(base0.empty());
  train_side_by_side(*ranks, *reference, many, one, 15);
  if (::testing::Test::HasFatalFailure()) return;
  const auto pa = ranks->params(), pb = reference->params();
  const double err = parameter_relative_error(*ranks, pa, *reference, pb);
  // As the whole model's runs above: bit for bit at two ranks without accumulation, fp32 reassociation otherwise.
  EXPECT_LT(err, grad_accum == 1 && comm.world() <= 2 ? 1e-6 : 1e-5) << "adapters after 15 steps, stage " << stage;
  if (comm.rank() == 0) std::printf("  adapter relative error after 15 steps: %.3g\n", err);
  EXPECT_TRUE(ranks->frozen_params() == base0) << "the frozen base changed";
  // The base is the one-rank run's too (the seeded initialisation, whatever the partition).
  const std::vector<float> base_one = reference->frozen_params();
  const ParamLayout& bl = *ranks->frozen_layout();
  for (const ParamTensor& t : reference->frozen_layout()->tensors())
    for (const ParamTensor& u : bl.tensors())
      if (u.name == t.name)
        ASSERT_TRUE(std::equal(base_one.begin() + t.offset, base_one.begin() + t.offset + t.numel(),
                               base0.begin() + u.offset)) << t.name;
}

TEST(ZeroLoraOverMpi, Stage0EqualsOneRank) { expect_lora_equal_to_one_rank(0, 1, 0); }
TEST(ZeroLoraOverMpi, Stage1WithAccumulationEqualsOneRank) { expect_lora_equal_to_one_rank(1, 2, 0); }
TEST(ZeroLoraOverMpi, Stage2EqualsOneRank) { expect_lora_equal_to_one_rank(2, 1, 0); }
TEST(ZeroLoraOverMpi, Stage3NothingPersistentEqualsOneRank) { expect_lora_equal_to_one_rank(3, 1, 0); }
TEST(ZeroLoraOverMpi, Stage3AdaptersPersistentWithAccumulationEqualsOneRank) {
  expect_lora_equal_to_one_rank(3, 2, 3000);  // DeepSpeed's default persistence keeps small adapters whole
}
TEST(ZeroLoraOverMpi, QloraStage2EqualsOneRank) { expect_lora_equal_to_one_rank(2, 1, 0, true); }

TEST(ZeroOverMpi, CommunicationBytesAreTwoPsi) {
  // Stages 0-2 move 2 x the flat buffer per step (all-reduce = reduce-scatter + all-gather), stage 2 with
  // A micro-steps reduces A times (the planner's rule, sim/comm_model.cpp).
  Communicator& comm = *world_comm;
  for (int stage = 0; stage <= 2; ++stage) {
    ExecConfig c = small_config(stage, 2, 20000);
    comm.reset_counters();
    auto t = make_cpu_trainer(c, &comm);
    TokenSource data = TokenSource::synthetic(vocab(), 9);
    const TokenBatch b = next_rank_share(data, c.micro_batch, c.seq_len, c.grad_accum, comm.world(), comm.rank());
    t->step(b.inputs, b.targets);
    const std::int64_t P = t->layout().total() * 4;
    const CommCounters& k = comm.counters();
    if (comm.world() == 1) continue;
    if (stage == 0) {
      EXPECT_EQ(k.bytes[0], P);
      EXPECT_EQ(k.bytes[1] + k.bytes[2], 0);
    } else {
      EXPECT_EQ(k.bytes[0], 0) << "stage " << stage;
      EXPECT_EQ(k.bytes[1], stage == 2 ? 2 * P : P) << "stage " << stage;
      EXPECT_EQ(k.bytes[2], P) << "stage " << stage;
    }
  }
}

TEST(ZeroOverMpi, Stage3CommunicationBytesAreThreePsi) {
  // Nothing persistent and no reuse: each micro-step gathers every unit for its forward and again for its
  // backward (the tied embeddings twice in the forward, as the LM head, then kept for the LM head's backward),
  // and reduce-scatters every gradient: 3 x the flat buffer per micro-step (ZeRO paper sec. 7.2.2).
  Communicator& comm = *world_comm;
  for (std::int64_t A : {1, 3}) {
    ExecConfig c = small_config(3, A, 5000);
    c.zero.param_persistence_threshold = 0;
    c.zero.max_reuse_distance = 0;
    comm.reset_counters();
    auto t = make_cpu_trainer(c, &comm);
    TokenSource data = TokenSource::synthetic(vocab(), 9);
    const TokenBatch b = next_rank_share(data, c.micro_batch, c.seq_len, c.grad_accum, comm.world(), comm.rank());
    t->step(b.inputs, b.targets);
    if (comm.world() == 1) continue;
    const std::int64_t P = t->layout().total() * 4;
    const CommCounters& k = comm.counters();
    EXPECT_EQ(k.bytes[0], 0);
    EXPECT_EQ(k.bytes[1], A * P) << "reduce-scatter, A = " << A;
    EXPECT_EQ(k.bytes[2], 2 * A * P) << "all-gather, A = " << A;
  }
}

// The planner's `--engine zeroplan` model against what the engine allocates and sends, component by component:
// the planner reads the executor's own layout code (sim/executor_layout.h), so these must be equal, at every
// stage and world size. With the optimizer offloaded, the host bytes too. (Stages 0-1 with accumulation are left out: only the CPU backend, whose kernels always
// accumulate, keeps a separate micro-step gradient buffer there.)
TEST(ZeroOverMpi, PlannerPredictsTheEngineBuffersAndBytes) {
  Communicator& comm = *world_comm;
  zeroplan::TransformerShape shape;
  shape.vocab_size = 257;
  shape.hidden = 64;
  shape.layers = 3;
  shape.heads = 2;
  shape.kv_heads = 2;
  shape.ffn_hidden = 256;
  shape.max_seq = 32;
  const zeroplan::ModelDescription model = zeroplan::expand_transformer("small", shape, "test");
  const zeroplan::ClusterDescription cluster =
      zeroplan::with_gpu_count(zeroplan::load_cluster("h200x4"), comm.world());
  for (int stage = 0; stage <= 3; ++stage)
    for (std::int64_t A : {1, 3})
      for (int mode = 0; mode < 4; ++mode) {
      // mode bit 0: offload_optimizer cpu; bit 1: offload_param cpu (stage 3)
      const bool offload = mode & 1, param = mode & 2;
      if (stage < 2 && A > 1) continue;
      if (offload && stage == 0) continue;
      if (param && stage != 3) continue;
      ExecConfig c = small_config(stage, A, 5000);
      c.zero.offload_optimizer = offload;
      c.zero.offload_param = param;
      zeroplan::TrainingConfig tr;
      tr.micro_batch = c.micro_batch;
      tr.seq_len = c.seq_len;
      tr.grad_accum = A;
      tr.precision = zeroplan::Precision::fp32;
      tr.zero.stage = stage;
      tr.zero.reduce_bucket_size = c.zero.reduce_bucket_elements;
      tr.zero.allgather_bucket_size = c.zero.allgather_bucket_elements;
      tr.zero.overlap_comm = c.zero.overlap_comm = true;
      tr.zero.param_persistence_threshold = c.zero.param_persistence_threshold = 300;
      tr.zero.prefetch_bucket_size = c.zero.prefetch_bucket_elements = 20000;
      const zeroplan::OffloadDevice optimizer = offload ? zeroplan::OffloadDevice::cpu : zeroplan::OffloadDevice::none;
      tr.zero.offload_optimizer = optimizer;
      const zeroplan::OffloadDevice params = param ? zeroplan::OffloadDevice::cpu : zeroplan::OffloadDevice::none;
      tr.zero.offload_param = params;
      // fewer staging buffers than buckets, so that min(buffer_count, buckets) is the count
      tr.zero.param_buffer_count = c.zero.param_buffer_count = 3;
      zeroplan::use_engine(tr, zeroplan::TrainingEngine::zeroplan);
      const zeroplan::PlanChoice choice{stage, optimizer, params};
      const zeroplan::MemoryEstimate estimate = zeroplan::estimate_memory(model, cluster, tr, choice);
      const auto predicted = estimate.gpu.components();
      comm.reset_counters();
      auto t = make_cpu_trainer(c, &comm);
      const MemoryReport report = t->memory();
      const auto& measured = report.peak_by_component;
      for (const char* name : {"params", "grads", "master_params", "optimizer_states", "gradient_buckets",
                               "gathered_params", "offload_buffers"}) {
        std::int64_t p = 0, m = 0;
        for (const auto& [n, b] : predicted) p += n == name ? b : 0;
        for (const auto& [n, b] : measured) m += n == name ? b : 0;
        EXPECT_EQ(p, m) << name << ", stage " << stage << ", A = " << A << ", offload " << offload << ", params "
                        << param;
      }
      if (param) EXPECT_GT(report.component("offload_buffers"), 0);
      // Host memory: the plan counts the node (every rank here), pinned (pin_memory's default).
      double host = static_cast<double>(report.host_total());
      comm.all_reduce_host(&host, 1);
      EXPECT_EQ(estimate.host.pinned, static_cast<std::int64_t>(host))
          << "stage " << stage << ", A = " << A << ", offload " << offload << ", params " << param;
      EXPECT_EQ(estimate.host.pageable, 0);
      EXPECT_EQ(offload || param, host > 0);
      // The bytes of a step after the first: with the optimizer on the CPU at stages 1-2 a step's parameter
      // all-gathers run in the next step's forward (the deferred update, exec/zero/zero_engine.h).
      TokenSource data = TokenSource::synthetic(vocab(), 9);
      for (int s = 0; s < 2; ++s) {
        comm.reset_counters();
        const TokenBatch b = next_rank_share(data, c.micro_batch, c.seq_len, c.grad_accum, comm.world(), comm.rank());
        t->step(b.inputs, b.targets);
      }
      const zeroplan::CommVolume v = zeroplan::estimate_comm(model, cluster, tr, choice);
      std::int64_t plan[3] = {0, 0, 0};
      for (const auto& col : v.collectives) plan[static_cast<int>(col.kind)] += col.bytes;
      const CommCounters& k = comm.counters();
      EXPECT_EQ(plan[0], k.bytes[0]) << "all-reduce, stage " << stage << ", A = " << A;
      EXPECT_EQ(plan[1], k.bytes[1]) << "reduce-scatter, stage " << stage << ", A = " << A;
      EXPECT_EQ(plan[2], k.bytes[2]) << "all-gather, stage " << stage << ", A = " << A << ", params " << param;
      }
}

// The planner's `--engine zeroplan` model of parameters on NVMe against the engine: the NVMe bytes per step (the
// fetch plan's reads, the update's writes), the swap files, the host's pinned bytes (swap buffers, the chunks kept
// in host memory) and the device's components must be equal (both read exec/zero/zero_buffer_layout.h).
TEST(ZeroParamNvmeOverMpi, PlannerPredictsTheEngineNvmeBytesPerStep) {
  const std::string dir = nvme_dir("param_planner");
  if (dir.empty()) GTEST_SKIP() << "no directory with direct I/O (O_DIRECT) under " << ZEROPLAN_TEST_SCRATCH_DIR;
  Communicator& comm = *world_comm;
  zeroplan::TransformerShape shape;
  shape.vocab_size = 257;
  shape.hidden = 64;
  shape.layers = 3;
  shape.heads = 2;
  shape.kv_heads = 2;
  shape.ffn_hidden = 256;
  shape.max_seq = 32;
  const zeroplan::ModelDescription model = zeroplan::expand_transformer("small", shape, "test");
  const zeroplan::ClusterDescription cluster =
      zeroplan::with_gpu_count(zeroplan::load_cluster("h200x4"), comm.world());
  for (std::int64_t A : {1, 2})
    for (const bool offload : {false, true})
      for (const std::int64_t max_in_cpu : {std::int64_t{0}, std::int64_t{10000}}) {
        ExecConfig c = small_config(3, A, 5000);
        c.zero.offload_optimizer = offload;
        c.zero.offload_param = true;
        c.zero.param_nvme_path = dir;
        c.zero.param_max_in_cpu = max_in_cpu;
        zeroplan::TrainingConfig tr;
        tr.micro_batch = c.micro_batch;
        tr.seq_len = c.seq_len;
        tr.grad_accum = A;
        tr.precision = zeroplan::Precision::fp32;
        tr.zero.stage = 3;
        tr.zero.reduce_bucket_size = c.zero.reduce_bucket_elements;
        tr.zero.allgather_bucket_size = c.zero.allgather_bucket_elements;
        tr.zero.overlap_comm = c.zero.overlap_comm = true;
        tr.zero.param_persistence_threshold = c.zero.param_persistence_threshold = 300;
        tr.zero.prefetch_bucket_size = c.zero.prefetch_bucket_elements = 20000;
        const zeroplan::OffloadDevice optimizer = offload ? zeroplan::OffloadDevice::cpu : zeroplan::OffloadDevice::none;
        tr.zero.offload_optimizer = optimizer;
        tr.zero.offload_param = zeroplan::OffloadDevice::nvme;
        tr.zero.nvme_path = dir;
        tr.zero.param_max_in_cpu = max_in_cpu;
        tr.zero.param_buffer_count = c.zero.param_buffer_count = 3;
        zeroplan::use_engine(tr, zeroplan::TrainingEngine::zeroplan);
        const zeroplan::PlanChoice choice{3, optimizer, zeroplan::OffloadDevice::nvme};
        const std::string what = "A = " + std::to_string(A) + ", offload " + std::to_string(offload) +
                                 ", max_in_cpu " + std::to_string(max_in_cpu);
        const zeroplan::MemoryEstimate estimate = zeroplan::estimate_memory(model, cluster, tr, choice);
        auto t = make_cpu_trainer(c, &comm);
        const MemoryReport report = t->memory();
        for (const char* name : {"params", "grads", "master_params", "optimizer_states", "gradient_buckets",
                                 "gathered_params", "offload_buffers"}) {
          std::int64_t p = 0;
          for (const auto& [n, b] : estimate.gpu.components()) p += n == name ? b : 0;
          EXPECT_EQ(p, report.component(name)) << name << ", " << what;
        }
        // The plan counts the node (every rank here).
        double host = static_cast<double>(report.host_total()), nvme = static_cast<double>(report.nvme_bytes);
        comm.all_reduce_host(&host, 1);
        comm.all_reduce_host(&nvme, 1);
        EXPECT_EQ(estimate.host.pinned, static_cast<std::int64_t>(host)) << what;
        EXPECT_EQ(estimate.nvme_bytes, static_cast<std::int64_t>(nvme)) << what;
        const zeroplan::CommVolume v = zeroplan::estimate_comm(model, cluster, tr, choice);
        TokenSource data = TokenSource::synthetic(vocab(), 9);
        for (int s = 0; s < 2; ++s) {
          const TokenBatch b = next_rank_share(data, c.micro_batch, c.seq_len, c.grad_accum, comm.world(), comm.rank());
          const StepResult r = t->step(b.inputs, b.targets);
          EXPECT_EQ(v.nvme_read_bytes, r.times.offload.param_nvme_read_bytes) << "step " << s << ", " << what;
          EXPECT_EQ(v.nvme_write_bytes, r.times.offload.param_nvme_write_bytes) << "step " << s << ", " << what;
          EXPECT_GT(r.times.offload.param_nvme_read_bytes, 0) << what;
        }
      }
}

TEST(ZeroPartition, BucketsSplitIntoEqualAlignedChunks) {
  const ModelShape s = make_shape(257, 64, 3, 2, 32);
  for (int world : {1, 2, 3, 4}) {
    const ParamLayout layout(s, zero_alignment(world));
    for (std::int64_t bucket : {1, 5000, 20000, 1 << 30}) {
      PartitionRules rules;
      rules.bucket_elements = bucket;
      const ZeroPartition p(layout, world, world - 1, rules);
      std::int64_t covered = 0, prev_begin = layout.total();
      for (const GradientBucket& b : p.buckets()) {
        EXPECT_EQ(b.end, prev_begin) << "buckets tile the buffer from the top down";
        EXPECT_EQ(b.chunk * world, b.elements());
        EXPECT_EQ(b.chunk % 64 == 0 || world == 1, true);
        covered += b.elements();
        prev_begin = b.begin;
      }
      EXPECT_EQ(prev_begin, 0);
      EXPECT_EQ(covered, layout.total());
      EXPECT_EQ(p.partition_elements() * world, layout.total());
      EXPECT_TRUE(p.buckets().back().embeddings);
    }
  }
}

// GPT-2 1.5B on 2 ranks with DeepSpeed's reduce_bucket_size (5e8 elements; a block holds 3.07e7): the blocks at
// both ends are cut into buckets doubling towards the middle (boundaries 1, 2, 4, 8, 16, 32 and 40, 44, 46, 47),
// no bucket exceeds 5e8, and stage 2 then needs two rotating bucket buffers (each block writes one bucket, plus
// the one being reduced) instead of three: 0.98 GB less at the peak on 2x H200.
TEST(ZeroPartition, TheBlocksAtBothEndsAreCutIntoDoublingBuckets) {
  const ModelShape s = make_shape(50304, 1600, 48, 25, 1024);
  const ParamLayout layout(s, zero_alignment(2));
  PartitionRules rules;  // 5e8 elements
  const ZeroPartition p(layout, 2, 0, rules);
  std::vector<std::int64_t> block_begins;
  for (const GradientBucket& b : p.buckets()) {
    EXPECT_TRUE(b.elements() <= rules.bucket_elements);
    if (!b.embeddings) block_begins.push_back(b.begin);
  }
  for (std::int64_t cut : {1, 2, 4, 8, 16, 32, 40, 44, 46, 47}) {
    const std::int64_t at = layout.block(cut, kQkvW).offset;
    EXPECT_NE(std::find(block_begins.begin(), block_begins.end(), at), block_begins.end())
        << "no bucket starts at block " << cut;
  }
  // [47, 48) with ln_f, [46, 47), [44, 46), [40, 44), [32, 40), [16, 32), [8, 16), [4, 8), [2, 4), [1, 2),
  // [0, 1), the embeddings.
  EXPECT_EQ(p.buckets().size(), 12u);
  ZeroSettings zero;
  zero.stage = 2;
  zero.overlap_comm = true;
  const ZeroBufferLayout z = zero_buffer_layout(layout, p, zero, 1);
  ASSERT_EQ(z.slot_elements.size(), 3u);  // two rotating buffers and the embeddings' own
  EXPECT_EQ(z.slot_elements[0], p.largest_bucket());
}

TEST(ZeroPartition, Stage3BucketsStayInsideUnitsAndSeparatePersistentTensors) {
  const ModelShape s = make_shape(257, 64, 3, 2, 32);
  for (int world : {1, 2, 4}) {
    const ParamLayout layout(s, zero_alignment(world));
    const auto units = gather_unit_ranges(layout);
    ASSERT_EQ(units.size(), 5u);  // embeddings, 3 blocks, final norm
    PartitionRules rules;
    rules.bucket_elements = 1 << 30;
    rules.stage3 = true;
    rules.persistence_threshold = 300;  // LayerNorm weights/biases and linear biases (<= 4 x 64), not weights
    const ZeroPartition p(layout, world, 0, rules);
    std::int64_t persistent = 0;
    for (const GradientBucket& b : p.buckets()) {
      int inside = 0;
      for (const auto& [lo, hi] : units) inside += b.begin >= lo && b.end <= hi;
      EXPECT_EQ(inside, 1) << "bucket [" << b.begin << ", " << b.end << ") crosses a unit";
      for (const ParamTensor& t : layout.tensors())
        if (t.offset >= b.begin && t.offset < b.end) EXPECT_EQ(b.persistent, t.numel() <= 300) << t.name;
      if (b.persistent) persistent += b.elements();
    }
    // per block 8 one-dimensional tensors, plus ln_f's two; with alignment each starts a fresh aligned run
    EXPECT_GE(persistent, (3 * 8 + 2) * 64);
    EXPECT_EQ(p.persistent_elements(), persistent);
    // one bucket per unit part: embeddings, (weights, 1-D tensors) per block, ln_f
    EXPECT_EQ(p.buckets().size(), 1u + 3 * 2 + 1);
  }
}

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  for (int i = 1; i < argc; ++i)
    if (std::string(argv[i]) == "--model=llama") llama_model = true;
  auto comm = make_mpi_communicator();
  world_comm = comm.get();
  // only rank 0 prints gtest's report; every rank runs every test (collectives need all of them)
  if (comm->rank() != 0) {
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
  }
  int failed = RUN_ALL_TESTS();
  double any = failed ? 1 : 0;
  comm->all_reduce_host(&any, 1);
  return any > 0 ? 1 : 0;
}
