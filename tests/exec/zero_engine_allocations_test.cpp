// What the ZeRO engine allocates for a 16-bit model, recorded through a device that only hands out memory, against
// the list the planner counts (exec/activation_accounting.h device_allocations, which `zeroplan plan --engine
// zeroplan` sums per component): every stage, 1-4 ranks, gradient accumulation, and the fp32 gradient settings
// (data_types.grad_accum_dtype and communication_data_type fp32), whose buffers only the CUDA backend allocates
// (the CPU reference computes in fp32), with and without the optimizer and parameters offloaded. Without a GPU,
// this is where a buffer the engine adds and the planner misses shows up.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/nf4_quantization.h"
#include "exec/activation_accounting.h"
#include "exec/lora_layout.h"
#include "exec/param_layout.h"
#include "exec/zero/zero_buffer_layout.h"
#include "exec/zero/zero_engine.h"
#include "exec/zero/zero_partition.h"

namespace zeroplan::exec {
namespace {

// A bf16 device whose buffers are real (small) host memory and whose operations do nothing.
class RecordingDevice final : public ZeroDevice {
 public:
  std::map<std::string, std::int64_t> bytes;

  CommDtype element_type() const override { return CommDtype::bf16; }
  void record_external(const char* component, const char*, void*, std::int64_t n) override { bytes[component] += n; }
  void* allocate(const char* component, const char*, std::int64_t elements, CommDtype type) override {
    const std::int64_t n = std::max<std::int64_t>(1, elements) * comm_dtype_bytes(type);
    bytes[component] += n;
    blocks_.push_back(std::make_unique<unsigned char[]>(static_cast<std::size_t>(n)));
    return blocks_.back().get();
  }
  void* allocate_host(const char*, const char*, std::int64_t n, bool) override {
    blocks_.push_back(std::make_unique<unsigned char[]>(static_cast<std::size_t>(std::max<std::int64_t>(1, n))));
    return blocks_.back().get();
  }
  void copy_to_host(void*, const void*, std::int64_t) override {}
  void copy_to_device(void*, const void*, std::int64_t) override {}
  void host_wait_event(int) override {}
  void init_host_master(float*, std::int64_t, std::int64_t) override {}
  bool kernels_overwrite() const override { return true; }
  bool lanes_concurrent() const override { return true; }
  void init_params(void*, float*, std::int64_t, std::int64_t) override {}
  void zero(void*, std::int64_t, CommDtype, Lane) override {}
  void accumulate(void*, CommDtype, const void*, CommDtype, std::int64_t, Lane) override {}
  void convert(void*, CommDtype, const void*, CommDtype, std::int64_t, Lane) override {}
  void sum_squares(const void*, CommDtype, std::int64_t, int) override {}
  void read_sum_squares(double* out, int count) override { std::fill(out, out + count, 0.0); }
  int max_norm_slots() const override { return 1 << 20; }
  void adamw(const AdamwRange&, float, float, float, float, float, float, int) override {}
  void upload_params(void*, float*, const float*, std::int64_t) override {}
  void download(const void*, float*, std::int64_t, CommDtype, double) override {}
  void lane_waits_for(Lane, Lane) override {}
  void record_event(int, Lane) override {}
  void wait_event(int, Lane) override {}
  int mark(Lane) override { return 0; }
  double seconds_between(int, int) override { return 0.0; }
  void clear_marks() override {}
  void synchronize() override {}

 private:
  std::vector<std::unique_ptr<unsigned char[]>> blocks_;
};

// Rank 0 of `world` ranks; no collective runs while the engine is built.
class IdleCommunicator final : public Communicator {
 public:
  explicit IdleCommunicator(int world) : world_(world) {}
  int rank() const override { return 0; }
  int world() const override { return world_; }
  std::string backend() const override { return "idle"; }
  void all_reduce_sum(const void*, void*, std::int64_t, CommDtype) override {}
  void reduce_scatter_sum(const void*, void*, std::int64_t, CommDtype) override {}
  void all_gather(const void*, void*, std::int64_t, CommDtype) override {}
  void group_start() override {}
  void group_end() override {}
  void all_reduce_host(double*, int) override {}
  void barrier() override {}
  void* comm_stream() const override { return nullptr; }

 private:
  int world_;
};

TEST(ZeroEngineAllocations, EqualWhatThePlannerCountsForEveryGradientPrecision) {
  const char* engine_components[] = {"params",           "grads",           "master_params",  "optimizer_states",
                                     "gradient_buckets", "gathered_params", "offload_buffers"};
  struct Case {
    int stage, offload;  // offload: 0 none, 1 the optimizer on the CPU (stages 1-3), 2 the parameters too (stage 3)
  };
  std::vector<Case> cases;
  for (int stage = 0; stage <= 3; ++stage)
    for (int offload = 0; offload <= (stage == 3 ? 2 : stage > 0 ? 1 : 0); ++offload) cases.push_back({stage, offload});
  for (const Case& k : cases)
    for (int world : {1, 2, 4})
      for (std::int64_t accumulation : {1, 2})
        for (int fp32 = 0; fp32 < 4; ++fp32) {
          ExecConfig c;
          c.shape = make_shape(257, 128, 2, 2, 256);
          c.precision = ExecPrecision::bf16;
          c.grad_accum = accumulation;
          c.zero.stage = k.stage;
          c.zero.reduce_bucket_elements = 40000;  // several buckets, the embeddings' own among them
          c.zero.param_persistence_threshold = 1000;
          c.zero.fp32_grad_accumulation = (fp32 & 1) != 0;
          c.zero.fp32_communication = (fp32 & 2) != 0;
          c.zero.offload_optimizer = k.offload >= 1;
          c.zero.offload_param = k.offload == 2;
          c.zero.cpu_optimizer_threads = 1;
          RecordingDevice device;
          IdleCommunicator comm(world);
          const ParamLayout layout(c.shape, zero_alignment(world));
          // As the trainers build it: the gradient partition lent where the MLP tensors hold it.
          const bool lent = mlp_saved_layout(c, world).holds_gradient_partition;
          const ZeroEngine engine(c, layout, device, comm, Trainability::trainable,
                                  lent ? GradientPartitionHome::trainer : GradientPartitionHome::engine);
          std::map<std::string, std::int64_t> planned;
          for (const DeviceAllocation& a : device_allocations(c, world)) planned[a.component] += a.bytes;
          for (const char* component : engine_components)
            EXPECT_EQ(device.bytes[component], planned[component])
                << component << ": stage " << k.stage << ", offload " << k.offload << ", " << world << " ranks, "
                << accumulation << " micro-steps, fp32 accumulation " << c.zero.fp32_grad_accumulation
                << ", fp32 reductions " << c.zero.fp32_communication;
        }
}

// The gradient partition over the MLP tensors (mlp_saved_layout), replayed in the backward's order: the head unit's
// gradients are final first, then each block's from the top down, then the embeddings'; a bucket is reduced once
// all its gradients are (exec/zero/zero_engine.cpp gradients_final_from), and its chunk must then lie inside the
// allocation and clear of every block whose backward has not run yet. Checked for GPT-2 (tied) and Llama (untied)
// shapes, stages 2-3, 1-4 ranks, with and without selective recompute; and the settings that keep a partition of the
// engine's own do.
TEST(MlpSavedLayout, TheGradientPartitionLandsOnlyOnBlocksTheBackwardHasFinished) {
  int held = 0;
  for (const bool llama : {false, true})
    for (const int stage : {2, 3})
      for (const int world : {1, 2, 4})
        for (const ExecRecompute recompute : {ExecRecompute::none, ExecRecompute::selective}) {
          ExecConfig c;
          c.shape = llama ? make_llama_shape(300, 128, 4, 4, 2, 352, 256) : make_shape(257, 128, 4, 2, 256);
          c.micro_batch = 2;
          c.seq_len = 64;
          c.precision = ExecPrecision::bf16;
          c.recompute = recompute;
          c.zero.stage = stage;
          c.zero.reduce_bucket_elements = 30000;  // buckets that straddle blocks at stage 2
          c.zero.param_persistence_threshold = 1000;
          const MlpSavedLayout m = mlp_saved_layout(c, world);
          SCOPED_TRACE(std::string(llama ? "llama" : "gpt-2") + ", stage " + std::to_string(stage) + ", " +
                       std::to_string(world) + " ranks" + (recompute == ExecRecompute::selective ? ", selective" : ""));
          ASSERT_TRUE(m.holds_gradient_partition);
          ++held;
          const ParamLayout layout = trained_layout(c, world);
          const ZeroPartition partition(layout, world, 0, partition_rules(c.zero));
          const std::int64_t L = c.shape.layers, e = 2;
          EXPECT_LE(e * partition.partition_elements(), m.bytes());
          EXPECT_LT(m.gradient_partition_beyond, e * partition.partition_elements());  // it saves bytes
          std::vector<bool> reduced(partition.buckets().size(), false);
          // (finished from, blocks still to run their backward: [0, live))
          std::vector<std::pair<std::int64_t, std::int64_t>> events{{layout.tail_begin(), L}};
          for (std::int64_t l = L - 1; l >= 0; --l) events.emplace_back(layout.block_begin(l), l);
          events.emplace_back(0, 0);
          for (const auto& [from, live] : events)
            for (std::size_t k = 0; k < partition.buckets().size(); ++k) {
              const GradientBucket& b = partition.buckets()[k];
              if (reduced[k] || b.begin < from) continue;
              reduced[k] = true;
              const std::int64_t lo = e * b.partition_offset, hi = e * (b.partition_offset + b.chunk);
              EXPECT_LE(hi, m.bytes());
              for (std::int64_t block = 0; block < live; ++block) {
                const std::int64_t begin = m.block_offset(block), end = begin + m.block_stride;
                EXPECT_TRUE(hi <= begin || lo >= end)
                    << "bucket " << k << "'s chunk [" << lo << ", " << hi << ") over block " << block << " ["
                    << begin << ", " << end << "), whose backward has not run";
              }
            }
          EXPECT_TRUE(std::all_of(reduced.begin(), reduced.end(), [](bool r) { return r; }));
          // Every block's tensors inside the allocation, none overlapping another's.
          for (std::int64_t block = 0; block + 1 < L; ++block)
            EXPECT_EQ(m.block_offset(block) - m.block_offset(block + 1), m.block_stride);
          EXPECT_EQ(m.block_offset(0) + m.block_stride, m.bytes());
        }
  EXPECT_EQ(held, 24);
  // What keeps the engine's own partition: one step of several micro-steps, full recompute, either offload, LoRA,
  // fp32 gradient accumulation, stages 0-1.
  ExecConfig c;
  c.shape = make_llama_shape(300, 128, 4, 4, 2, 352, 256);
  c.micro_batch = 2;
  c.seq_len = 64;
  c.precision = ExecPrecision::bf16;
  c.zero.stage = 3;
  ASSERT_TRUE(mlp_saved_layout(c, 2).holds_gradient_partition);
  const auto kept_apart = [&](auto change) {
    ExecConfig d = c;
    change(d);
    return !mlp_saved_layout(d, 2).holds_gradient_partition;
  };
  EXPECT_TRUE(kept_apart([](ExecConfig& d) { d.grad_accum = 2; }));
  EXPECT_TRUE(kept_apart([](ExecConfig& d) { d.recompute = ExecRecompute::full; }));
  EXPECT_TRUE(kept_apart([](ExecConfig& d) { d.zero.offload_optimizer = true; }));
  EXPECT_TRUE(kept_apart([](ExecConfig& d) { d.zero.offload_param = true; }));
  EXPECT_TRUE(kept_apart([](ExecConfig& d) { d.zero.fp32_grad_accumulation = true; }));
  EXPECT_TRUE(kept_apart([](ExecConfig& d) { d.zero.stage = 1; }));
  EXPECT_TRUE(kept_apart([](ExecConfig& d) {
    d.lora.enabled = true;
    d.lora.rank = 4;
    d.lora.alpha = 8;
    d.lora.modules = {"self_attn.q_proj"};
  }));
}

// LoRA: the frozen base's engine (parameters only; stage 3's partition and gathered units) and the adapters' engine
// (every state), as the CUDA trainer builds them, against the list the planner counts; the trainer's own params
// under NF4 (codes and constants, and the dequantised scratch weight) are added by hand here.
TEST(ZeroEngineAllocations, LoraBaseAndAdaptersEqualWhatTheListCounts) {
  const char* engine_components[] = {"params", "grads", "master_params", "optimizer_states", "gradient_buckets",
                                     "gathered_params", "offload_buffers"};
  for (int stage = 0; stage <= 3; ++stage)
    for (int world : {1, 2, 4})
      for (std::int64_t accumulation : {1, 2})
        for (bool nf4 : {false, true})
          for (int fp32 = 0; fp32 < 4; ++fp32) {
            ExecConfig c;
            c.shape = make_llama_shape(256, 64, 2, 4, 2, 96, 32);
            c.precision = ExecPrecision::bf16;
            c.grad_accum = accumulation;
            c.lora.enabled = true;
            c.lora.rank = 4;
            c.lora.modules = {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "mlp.down_proj"};
            c.lora.quantize_nf4 = nf4;
            c.zero.stage = stage;
            c.zero.reduce_bucket_elements = 3000;  // several buckets of adapters and of the base
            c.zero.param_persistence_threshold = 500;
            c.zero.fp32_grad_accumulation = (fp32 & 1) != 0;
            c.zero.fp32_communication = (fp32 & 2) != 0;
            RecordingDevice base_device, adapter_device;
            IdleCommunicator comm(world);
            const ParamLayout base(c.shape, zero_alignment(world), !nf4);
            const ParamLayout adapters = trained_layout(c, world);
            const ZeroEngine frozen(c, base, base_device, comm, Trainability::frozen);
            const ZeroEngine trained(c, adapters, adapter_device, comm);
            std::map<std::string, std::int64_t> planned;
            for (const DeviceAllocation& a : device_allocations(c, world)) planned[a.component] += a.bytes;
            std::int64_t trainer_params = 0;
            if (nf4) {
              const ParamLayout full(c.shape);
              std::int64_t widest = 0;
              // One bitsandbytes tensor per transformers module: q_proj, k_proj, v_proj (the qkv rows), o_proj,
              // gate_proj, up_proj (the gate_up rows), down_proj, each with its own constants.
              const std::int64_t C = c.shape.hidden, Q = c.shape.q_dim(), KV = c.shape.kv_dim(), F = c.shape.ffn_hidden;
              for (std::int64_t l = 0; l < c.shape.layers; ++l) {
                for (std::int64_t n : {Q * C, KV * C, KV * C, C * Q, F * C, F * C, C * F})
                  trainer_params += nf4_tensor_bytes(n);
                for (BlockTensor w : {kQkvW, kAttProjW, kFcW, kFcProjW})
                  widest = std::max(widest, full.block(l, w).numel());
              }
              trainer_params += 2 * widest;
            }
            EXPECT_EQ(base_device.bytes["grads"] + base_device.bytes["optimizer_states"] +
                          base_device.bytes["master_params"] + base_device.bytes["gradient_buckets"],
                      0)
                << "the frozen base holds parameters only";
            for (const char* component : engine_components)
              EXPECT_EQ(base_device.bytes[component] + adapter_device.bytes[component] +
                            (std::string(component) == "params" ? trainer_params : 0),
                        planned[component])
                  << component << ": stage " << stage << ", " << world << " ranks, " << accumulation
                  << " micro-steps, nf4 " << nf4 << ", fp32 settings " << fp32;
          }
}

}  // namespace
}  // namespace zeroplan::exec
