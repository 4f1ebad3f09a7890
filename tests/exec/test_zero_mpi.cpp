// N ranks checked against one rank: every ZeRO stage over MPI (the CPU backend's communicator) must give the
// losses and parameters of a one-rank run over the same global batch. Run by ctest under mpirun with 2 and 4
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

using namespace zeroplan::exec;

namespace {

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

namespace {

// Trains a and b side by side for 8 steps over the same data: losses and gradient norms equal at every step
// (`each` checks more of each pair), some step clipped, and the parameters and optimizer states equal after.
void expect_equal_runs(Trainer& a, Trainer& b, const ExecConfig& c,
                       const std::function<void(const StepResult&, const StepResult&)>& each) {
  Communicator& comm = *world_comm;
  TokenSource data_a = TokenSource::synthetic(vocab(), 5), data_b = TokenSource::synthetic(vocab(), 5);
  int clipped = 0;
  for (int step = 0; step < 8; ++step) {
    const TokenBatch ba = next_rank_share(data_a, c.micro_batch, c.seq_len, c.grad_accum, comm.world(), comm.rank());
    const TokenBatch bb = next_rank_share(data_b, c.micro_batch, c.seq_len, c.grad_accum, comm.world(), comm.rank());
    const StepResult ra = a.step(ba.inputs, ba.targets);
    const StepResult rb = b.step(bb.inputs, bb.targets);
    ASSERT_EQ(ra.loss, rb.loss) << "step " << step;
    ASSERT_EQ(ra.grad_norm, rb.grad_norm) << "step " << step;
    clipped += ra.grad_norm > c.optimizer.grad_clip;
    each(ra, rb);
  }
  EXPECT_GT(clipped, 0) << "no step clipped: the clipping factor was not exercised";
  const auto pa = a.params(), pb = b.params();
  ASSERT_EQ(pa.size(), pb.size());
  std::size_t differ = 0;
  for (std::size_t i = 0; i < pa.size(); ++i) differ += pa[i] != pb[i];
  EXPECT_EQ(differ, 0u) << "parameters after 8 steps, stage " << c.zero.stage << ", A = " << c.grad_accum;
  std::vector<float> ma, mb, m1, m2, v1, v2;
  a.read_owned_state(ma, m1, v1);
  b.read_owned_state(mb, m2, v2);
  EXPECT_EQ(ma, mb) << "master";
  EXPECT_EQ(m1, m2) << "AdamW momentum";
  EXPECT_EQ(v1, v2) << "AdamW variance";
}

// ZeRO-Offload against the same run without it, at the same world size: the CPU AdamW (exec/offload/cpu_adamw.h)
// is bit for bit the CPU backend's AdamW, and the offloaded states take the same values in the same order, so
// losses, gradient norms, parameters and optimizer states must be equal, not close.
// sub_group: the pieces the partition is updated in (sub_group_size), so that pieces split buckets.
void expect_offload_equals_no_offload(int stage, std::int64_t grad_accum, std::int64_t bucket_elements,
                                      std::int64_t sub_group = 1000000000) {
  Communicator& comm = *world_comm;
  ExecConfig plain = small_config(stage, grad_accum, bucket_elements);
  ExecConfig offloaded = plain;
  offloaded.zero.offload_optimizer = true;
  offloaded.zero.sub_group_elements = sub_group;
  auto a = make_cpu_trainer(plain, &comm);
  auto b = make_cpu_trainer(offloaded, &comm);
  expect_equal_runs(*a, *b, plain, [](const StepResult& ra, const StepResult& rb) {
    EXPECT_GT(rb.times.offload.pieces, 0);
    EXPECT_EQ(ra.times.offload.pieces, 0);
  });
  // Nothing of the optimizer on the "device"; the states in host memory.
  const MemoryReport mem = b->memory();
  EXPECT_EQ(mem.component("optimizer_states"), 0);
  EXPECT_EQ(mem.component("master_params"), 0);
  EXPECT_GT(mem.host_total(), 0);
  EXPECT_EQ(a->memory().host_total(), 0);
}

}  // namespace

TEST(ZeroOffloadOverMpi, Stage1EqualsNoOffload) { expect_offload_equals_no_offload(1, 1, 20000); }
TEST(ZeroOffloadOverMpi, Stage1WithAccumulationEqualsNoOffload) { expect_offload_equals_no_offload(1, 3, 5000); }
TEST(ZeroOffloadOverMpi, Stage2EqualsNoOffload) { expect_offload_equals_no_offload(2, 1, 20000); }
TEST(ZeroOffloadOverMpi, Stage2WithAccumulationEqualsNoOffload) { expect_offload_equals_no_offload(2, 3, 5000); }
TEST(ZeroOffloadOverMpi, Stage2PiecesSplitBuckets) { expect_offload_equals_no_offload(2, 2, 20000, 999); }
TEST(ZeroOffloadOverMpi, Stage3PiecesSplitBuckets) { expect_offload_equals_no_offload(3, 1, 20000, 1000); }
TEST(ZeroOffloadOverMpi, Stage3EqualsNoOffload) { expect_offload_equals_no_offload(3, 1, 20000); }
TEST(ZeroOffloadOverMpi, Stage3WithAccumulationEqualsNoOffload) { expect_offload_equals_no_offload(3, 2, 5000); }

namespace {

std::int64_t host_component(const MemoryReport& m, const std::string& name) {
  for (const auto& [n, b] : m.host_by_component)
    if (n == name) return b;
  return 0;
}

// set_params and restore_state (what a checkpoint's resume calls) from b's parameters and owned states: c then
// continues exactly as b.
void expect_restored_continues(Trainer& b, Trainer& c, const ExecConfig& config) {
  Communicator& comm = *world_comm;
  const auto pb = b.params();
  std::vector<float> mb, m2, v2;
  b.read_owned_state(mb, m2, v2);
  c.set_params(pb);
  EXPECT_EQ(c.params(), pb) << "set_params";
  const auto ranges = b.owned_ranges();
  c.restore_state(
      [&](std::int64_t flat, std::int64_t n, float* master, float* m, float* v) {
        std::int64_t at = 0;
        for (const auto& [begin, count] : ranges) {
          if (flat >= begin && flat + n <= begin + count) {
            const std::int64_t i = at + (flat - begin);
            std::copy(mb.begin() + i, mb.begin() + i + n, master);
            if (m) std::copy(m2.begin() + i, m2.begin() + i + n, m);
            if (v) std::copy(v2.begin() + i, v2.begin() + i + n, v);
            return;
          }
          at += count;
        }
        // persistent tensors, whole: their values from the gathered parameters
        std::copy(pb.begin() + flat, pb.begin() + flat + n, master);
      },
      b.optimizer_step(), b.loss_scaler_state());
  TokenSource data_b = TokenSource::synthetic(vocab(), 6);
  for (int step = 0; step < 2; ++step) {
    const TokenBatch bb = next_rank_share(data_b, config.micro_batch, config.seq_len, config.grad_accum, comm.world(),
                                          comm.rank());
    const StepResult rb = b.step(bb.inputs, bb.targets);
    const StepResult rc = c.step(bb.inputs, bb.targets);
    ASSERT_EQ(rb.loss, rc.loss) << "restored, step " << step;
  }
  EXPECT_EQ(b.params(), c.params()) << "restored";
}

// ZeRO-Infinity parameter offload (offload_param cpu, stage 3) against stage 3 without it, at the same world
// size: the host partition holds the values the device partition would (each chunk copied to a staging buffer
// and all-gathered from there), and AdamW (device or CPU) computes the same update, so losses, norms,
// parameters and states must be equal, not close. buffer_count: the staging buffers (1 forces every gather
// group down to one chunk and every buffer to be reused within a unit).
void expect_param_offload_equals_no_offload(std::int64_t grad_accum, std::int64_t bucket_elements,
                                            bool offload_optimizer, std::int64_t buffer_count,
                                            std::int64_t persistence = 300) {
  Communicator& comm = *world_comm;
  ExecConfig plain = small_config(3, grad_accum, bucket_elements);
  plain.zero.param_persistence_threshold = persistence;
  ExecConfig offloaded = plain;
  offloaded.zero.offload_param = true;
  offloaded.zero.offload_optimizer = offload_optimizer;
  offloaded.zero.param_buffer_count = buffer_count;
  auto a = make_cpu_trainer(plain, &comm);
  auto b = make_cpu_trainer(offloaded, &comm);
  double h2d = 0, d2h = 0;
  expect_equal_runs(*a, *b, plain, [&](const StepResult& ra, const StepResult& rb) {
    EXPECT_EQ(ra.times.offload.param_to_device_s, 0.0);
    h2d += rb.times.offload.param_to_device_s;
    d2h += rb.times.offload.param_to_host_s;
  });
  EXPECT_GT(h2d, 0) << "no parameter copied host to device";
  // The device AdamW's results are copied back; the CPU AdamW writes the host partition itself.
  if (offload_optimizer) EXPECT_EQ(d2h, 0.0);
  else EXPECT_GT(d2h, 0);
  // No parameter partition on the "device": staging buffers instead; the partition in host memory (in fp32
  // training with the optimizer offloaded too, the host master is the partition).
  const MemoryReport mem = b->memory();
  EXPECT_EQ(mem.component("params"), 0);
  EXPECT_GT(a->memory().component("params"), 0);
  EXPECT_GT(mem.component("offload_buffers"), 0);
  EXPECT_EQ(host_component(mem, "offload_params") > 0, !offload_optimizer);
  // set_params and checkpoints' restore_state write the host partition.
  auto c = make_cpu_trainer(offloaded, &comm);
  expect_restored_continues(*b, *c, plain);
}

}  // namespace

namespace {

// A directory for the NVMe swap files of this test and world size (every rank's files go in its own
// zeroplan_rank<r> below it), on the build directory's disk: /tmp may be a tmpfs without direct I/O. Empty when
// that disk has no direct I/O either (the store says so): the caller skips.
std::string nvme_dir(const std::string& test) {
  // The model is in the name: ctest runs the GPT-2 and the Llama binaries of one world size side by side.
  const std::string dir = std::string(ZEROPLAN_TEST_SCRATCH_DIR) + "/nvme_" + (llama_model ? "llama_" : "") + test +
                          "_world" + std::to_string(world_comm->world());
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  try {
    zeroplan::exec::offload::NvmeStore probe(dir, world_comm->rank());
  } catch (const zeroplan::InputError& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return "";
  }
  return dir;
}

// ZeRO-Infinity's optimizer offload (offload_optimizer nvme) against offload to the CPU at the same world size:
// the same CPU AdamW on the same pieces, the states only swapped through files in between, so losses, norms,
// parameters and states must be equal, not close. sub_group: the pieces (several per bucket); buffer_count: the
// swap buffers (1: no overlap, each piece read after the previous one is written back).
void expect_nvme_equals_cpu_offload(int stage, std::int64_t grad_accum, std::int64_t sub_group,
                                    std::int64_t buffer_count, const std::string& test) {
  const std::string dir = nvme_dir(test);
  if (dir.empty()) GTEST_SKIP() << "no directory with direct I/O (O_DIRECT) under " << ZEROPLAN_TEST_SCRATCH_DIR;
  Communicator& comm = *world_comm;
  ExecConfig cpu = small_config(stage, grad_accum, 5000);
  cpu.zero.offload_optimizer = true;
  cpu.zero.sub_group_elements = sub_group;
  ExecConfig nvme = cpu;
  nvme.zero.nvme_path = dir;
  nvme.zero.optimizer_buffer_count = buffer_count;
  auto a = make_cpu_trainer(cpu, &comm);
  auto b = make_cpu_trainer(nvme, &comm);
  const std::int64_t files = b->memory().nvme_bytes;
  EXPECT_GT(files, 0);
  expect_equal_runs(*a, *b, cpu, [&](const StepResult& ra, const StepResult& rb) {
    EXPECT_EQ(ra.times.offload.pieces, rb.times.offload.pieces);
    EXPECT_EQ(ra.times.offload.nvme_read_bytes, 0);
    // Every piece swapped in and out once per step.
    EXPECT_EQ(rb.times.offload.nvme_read_bytes, files);
    EXPECT_EQ(rb.times.offload.nvme_write_bytes, files);
  });
  // The states are on disk: the host keeps the gradient partition, the updated parameters and the swap buffers.
  const MemoryReport mem = b->memory();
  EXPECT_EQ(host_component(mem, "offload_master_params"), 0);
  EXPECT_EQ(host_component(mem, "offload_optimizer_states"), 0);
  EXPECT_GT(host_component(mem, "offload_swap_buffers"), 0);
  EXPECT_EQ(a->memory().nvme_bytes, 0);
  // The files hold at least the three fp32 states of the partition (each piece's padded to 4096 bytes).
  std::int64_t owned = 0;
  for (const auto& r : b->owned_ranges()) owned += r.second;
  EXPECT_GE(files, 12 * owned);
  auto c = make_cpu_trainer(nvme, &comm);
  expect_restored_continues(*b, *c, cpu);
}

}  // namespace

TEST(ZeroNvmeOffloadOverMpi, Stage1EqualsCpuOffload) { expect_nvme_equals_cpu_offload(1, 1, 999, 4, "s1"); }
TEST(ZeroNvmeOffloadOverMpi, Stage2WithAccumulationEqualsCpuOffload) {
  expect_nvme_equals_cpu_offload(2, 3, 999, 4, "s2");
}
TEST(ZeroNvmeOffloadOverMpi, Stage3EqualsCpuOffload) { expect_nvme_equals_cpu_offload(3, 2, 1000, 4, "s3"); }
TEST(ZeroNvmeOffloadOverMpi, OneSwapBuffer) { expect_nvme_equals_cpu_offload(3, 1, 999, 1, "b1"); }
TEST(ZeroNvmeOffloadOverMpi, TwoSwapBuffersWholeBuckets) { expect_nvme_equals_cpu_offload(2, 1, 1000000000, 2, "b2"); }

TEST(ZeroNvmeOffloadOverMpi, UnusablePathIsAnInputErrorNamingTheField) {
  ExecConfig c = small_config(3, 1, 20000);
  c.zero.offload_optimizer = true;
  c.zero.nvme_path = std::string(ZEROPLAN_TEST_SCRATCH_DIR) + "/no_such_directory";
  try {
    make_cpu_trainer(c, world_comm);
    ADD_FAILURE() << "a missing nvme_path was accepted";
  } catch (const zeroplan::InputError& e) {
    EXPECT_NE(std::string(e.what()).find("zero_optimization.offload_optimizer.nvme_path"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("does not exist"), std::string::npos) << e.what();
  }
  c.zero.nvme_path = ZEROPLAN_TEST_SCRATCH_DIR;
  c.zero.optimizer_buffer_count = 0;
  EXPECT_THROW(make_cpu_trainer(c, world_comm), std::invalid_argument);
}

namespace {

// ZeRO-Infinity's parameter offload to NVMe (offload_param nvme) against offload_param cpu at the same world size:
// the chunks only go through files and swap buffers in between, so losses, norms, parameters and states must be
// equal, not close (the --deterministic equivalence: the CPU backend is deterministic by construction). Every step
// reads each chunk on NVMe of every all-gather of the fetch plan and writes every chunk once, whole 4096-byte
// blocks, exactly the figures the planner reads (zero_buffer_layout.h); checkpoints' set_params and restore_state
// write the files and the run continues bit for bit.
struct ParamNvmeCase {
  std::int64_t grad_accum = 1;
  std::int64_t bucket_elements = 20000;
  bool offload_optimizer = false;
  bool optimizer_nvme = false;
  std::int64_t buffer_count = 5;
  std::int64_t max_in_cpu = 0;
  std::int64_t persistence = 300;
};

void expect_param_nvme_equals_param_cpu(const ParamNvmeCase& k, const std::string& test) {
  const std::string dir = nvme_dir("param_" + test);
  if (dir.empty()) GTEST_SKIP() << "no directory with direct I/O (O_DIRECT) under " << ZEROPLAN_TEST_SCRATCH_DIR;
  Communicator& comm = *world_comm;
  ExecConfig cpu = small_config(3, k.grad_accum, k.bucket_elements);
  cpu.zero.param_persistence_threshold = k.persistence;
  cpu.zero.offload_param = true;
  cpu.zero.offload_optimizer = k.offload_optimizer;
  cpu.zero.param_buffer_count = k.buffer_count;
  if (k.optimizer_nvme) cpu.zero.nvme_path = dir;
  ExecConfig nvme = cpu;
  nvme.zero.param_nvme_path = dir;
  nvme.zero.param_max_in_cpu = k.max_in_cpu;
  auto a = make_cpu_trainer(cpu, &comm);
  auto b = make_cpu_trainer(nvme, &comm);
  const ZeroPartition partition(b->layout(), comm.world(), comm.rank(), partition_rules(nvme.zero));
  const ZeroBufferLayout buffers = zero_buffer_layout(b->layout(), partition, nvme.zero, k.grad_accum);
  const std::int64_t files = buffers.param_nvme_file_bytes(4);
  // fp32 with the device AdamW: the update reads every chunk once more (the parameters are its master).
  const std::int64_t reads =
      k.grad_accum * buffers.param_nvme_read_bytes_per_micro_step(4) + (k.offload_optimizer ? 0 : files);
  ASSERT_GT(files, 0);
  EXPECT_GT(reads, 0);
  EXPECT_EQ(b->memory().nvme_bytes - a->memory().nvme_bytes, files);
  expect_equal_runs(*a, *b, cpu, [&](const StepResult& ra, const StepResult& rb) {
    EXPECT_EQ(ra.times.offload.param_nvme_read_bytes, 0);
    EXPECT_EQ(rb.times.offload.param_nvme_read_bytes, reads);
    EXPECT_EQ(rb.times.offload.param_nvme_write_bytes, files);
    EXPECT_GT(rb.times.offload.param_to_device_s, 0);
  });
  // The chunks on NVMe take swap buffers instead of host memory; those kept in host memory are listed.
  const MemoryReport ma = a->memory(), mb = b->memory();
  EXPECT_EQ(host_component(mb, "offload_swap_buffers") - host_component(ma, "offload_swap_buffers"),
            buffers.param_swap_buffer_bytes(4));
  EXPECT_EQ(host_component(mb, "offload_params"), buffers.param_host_elements * 4);
  if (k.max_in_cpu > 0) EXPECT_GT(buffers.param_host_elements, 0);
  auto c = make_cpu_trainer(nvme, &comm);
  expect_restored_continues(*b, *c, cpu);
}

// The swap files of this process's parameter swappers under dir/zeroplan_rank<r>.
std::vector<std::filesystem::path> param_swap_files(const std::string& dir) {
  std::vector<std::filesystem::path> files;
  const auto rank_dir = std::filesystem::path(dir) / ("zeroplan_rank" + std::to_string(world_comm->rank()));
  for (const auto& e : std::filesystem::directory_iterator(rank_dir))
    if (e.path().filename().string().rfind("param_", 0) == 0) files.push_back(e.path());
  return files;
}

}  // namespace

TEST(ZeroParamNvmeOverMpi, DeviceAdamwEqualsParamCpu) { expect_param_nvme_equals_param_cpu({}, "dev"); }
TEST(ZeroParamNvmeOverMpi, AccumulationAndOneSwapBufferEqualsParamCpu) {
  expect_param_nvme_equals_param_cpu({3, 5000, false, false, 1}, "b1");
}
TEST(ZeroParamNvmeOverMpi, CpuAdamwEqualsParamCpu) { expect_param_nvme_equals_param_cpu({1, 20000, true}, "opt"); }
TEST(ZeroParamNvmeOverMpi, OptimizerOnNvmeTooNothingPersistentEqualsParamCpu) {
  expect_param_nvme_equals_param_cpu({2, 5000, true, true, 2, 0, 0}, "optnvme");
}
TEST(ZeroParamNvmeOverMpi, MaxInCpuKeepsTheFirstChunksEqualsParamCpu) {
  expect_param_nvme_equals_param_cpu({1, 5000, true, false, 3, 12000}, "maxcpu");
}

TEST(ZeroParamNvmeOverMpi, UnwritablePathIsAnInputErrorNamingIt) {
  ExecConfig c = small_config(3, 1, 20000);
  c.zero.param_persistence_threshold = 300;
  c.zero.offload_param = true;
  // Root writes to a read-only directory: /sys refuses it any new directory (EPERM).
  std::string path = "/sys";
  if (geteuid() != 0) {
    path = std::string(ZEROPLAN_TEST_SCRATCH_DIR) + "/nvme_read_only_world" + std::to_string(world_comm->world());
    std::filesystem::create_directories(path);
    std::filesystem::permissions(path, std::filesystem::perms::owner_read | std::filesystem::perms::owner_exec);
  }
  c.zero.param_nvme_path = path;
  try {
    make_cpu_trainer(c, world_comm);
    ADD_FAILURE() << "an unwritable nvme_path was accepted";
  } catch (const zeroplan::InputError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("zero_optimization.offload_param.nvme_path"), std::string::npos) << what;
    EXPECT_NE(what.find("'" + path + "'"), std::string::npos) << what;
    EXPECT_NE(what.find("not writable"), std::string::npos) << what;
    EXPECT_EQ(what.find('\n'), std::string::npos) << what;
  }
  if (geteuid() != 0) std::filesystem::permissions(path, std::filesystem::perms::owner_all);
}

TEST(ZeroParamNvmeOverMpi, AFileRemovedMidRunIsAnErrorNamingIt) {
  const std::string dir = nvme_dir("param_removed");
  if (dir.empty()) GTEST_SKIP() << "no directory with direct I/O (O_DIRECT) under " << ZEROPLAN_TEST_SCRATCH_DIR;
  Communicator& comm = *world_comm;
  ExecConfig c = small_config(3, 1, 5000);
  c.zero.param_persistence_threshold = 300;  // chunks on NVMe (below it, tensors stay whole and in host memory)
  c.zero.offload_param = true;
  c.zero.param_nvme_path = dir;
  auto t = make_cpu_trainer(c, &comm);
  TokenSource data = TokenSource::synthetic(vocab(), 5);
  TokenBatch b = next_rank_share(data, c.micro_batch, c.seq_len, c.grad_accum, comm.world(), comm.rank());
  t->step(b.inputs, b.targets);
  const auto files = param_swap_files(dir);
  ASSERT_FALSE(files.empty());
  // Every rank removes all of its own: each fails at the same point, its first read of the step (before any
  // collective, so that no rank waits in one for a rank that failed).
  for (const auto& f : files) std::filesystem::remove(f);
  b = next_rank_share(data, c.micro_batch, c.seq_len, c.grad_accum, comm.world(), comm.rank());
  try {
    t->step(b.inputs, b.targets);
    ADD_FAILURE() << "a step ran on with " << files.size() << " swap files removed";
  } catch (const std::exception& e) {
    const std::string what = e.what();
    const std::string rank_dir = dir + "/zeroplan_rank" + std::to_string(comm.rank()) + "/param_";
    EXPECT_NE(what.find(rank_dir), std::string::npos) << what;
    EXPECT_NE(what.find("removed"), std::string::npos) << what;
    EXPECT_NE(what.find("nvme_io.cpp:"), std::string::npos) << "the check's file:line: " << what;
    EXPECT_EQ(what.find('\n'), std::string::npos) << what;
  }
}

TEST(ZeroParamOffloadOverMpi, Stage3EqualsNoOffload) { expect_param_offload_equals_no_offload(1, 20000, false, 5); }
TEST(ZeroParamOffloadOverMpi, WithAccumulationAndOneStagingBuffer) {
  expect_param_offload_equals_no_offload(3, 5000, false, 1);
}
TEST(ZeroParamOffloadOverMpi, WithOptimizerOffloadEqualsNoOffload) {
  expect_param_offload_equals_no_offload(1, 20000, true, 5);
}
TEST(ZeroParamOffloadOverMpi, WithOptimizerOffloadAccumulationAndTwoStagingBuffers) {
  expect_param_offload_equals_no_offload(2, 5000, true, 2);
}
TEST(ZeroParamOffloadOverMpi, NothingPersistentOneStagingBuffer) {
  expect_param_offload_equals_no_offload(2, 5000, true, 1, 0);
}

TEST(ZeroParamOffloadOverMpi, RefusedBelowStage3AndWithTooSmallBuffers) {
  ExecConfig c = small_config(2, 1, 20000);
  c.zero.offload_param = true;
  EXPECT_THROW(make_cpu_trainer(c, world_comm), std::invalid_argument);
  c.zero.stage = 3;
  c.zero.param_buffer_elements = 16;  // smaller than the largest chunk
  try {
    make_cpu_trainer(c, world_comm);
    ADD_FAILURE() << "a staging buffer smaller than a chunk was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("offload_param.buffer_size"), std::string::npos) << e.what();
  }
}

TEST(ZeroOffloadOverMpi, StageZeroIsRefused) {
  ExecConfig c = small_config(0, 1, 20000);
  c.zero.offload_optimizer = true;
  EXPECT_THROW(make_cpu_trainer(c, world_comm), std::invalid_argument);
}

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
