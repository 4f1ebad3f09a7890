// The CPU AdamW of ZeRO-Offload: one fused pass over a rank's fp32 partition that reads the master parameters p,
// the gradients g (fp32, bf16 or fp16) and the moments m, v, and writes p, m, v and, when asked, the rounded 16-bit
// copy of p that goes back to the GPU. Vectorised (AVX-512F, AVX2 or plain C++, chosen at run time from what the
// CPU supports) and multithreaded (a persistent thread pool of an explicit size). Every element gets the same sequence of
// IEEE operations on every path and every thread count, so the result is bit-identical to the scalar path and to
// the CPU reference's cpu::adamw (exec/cpu/cpu_ops.cpp) on the same inputs.
#pragma once

#include <cstdint>
#include <cstddef>
#include <limits>

#include "exec/offload/thread_pool.h"

namespace zeroplan::exec::offload {

// Instruction sets the update has a path for, best last.
enum class CpuIsa { scalar, avx2, avx512 };

// The best path this CPU runs (__builtin_cpu_supports): avx512 needs AVX-512F; avx2 needs AVX2 and F16C.
CpuIsa detect_cpu_isa();
bool cpu_supports(CpuIsa isa);
const char* cpu_isa_name(CpuIsa isa);  // "scalar", "avx2", "avx512"

// The 16-bit copy's format; both are rounded to nearest, ties to even (NaN stays NaN).
enum class HalfFormat { bf16, fp16 };

// Optimizer threads for one rank: the node's logical cores (std::thread::hardware_concurrency) divided among the
// ranks on the node, at least 1. Sizing this ourselves avoids the trap of torchrun's one OpenMP thread per
// process (OMP_NUM_THREADS=1), which DeepSpeed's CPU Adam inherits. Throws std::invalid_argument when
// local_ranks < 1 and std::runtime_error when the core count is unknown.
int default_optimizer_threads(int local_ranks);
// The CPU AdamW's threads of one rank: `configured` (ExecConfig's zero.cpu_optimizer_threads, --cpu-threads-per-rank)
// when above 0, else default_optimizer_threads(local_ranks). The host work of a rank (the offloaded optimizer, the
// frozen base's quantisation) runs on these.
int optimizer_threads(int configured, int local_ranks);

// One step's hyperparameters. The update (PyTorch's AdamW, decoupled weight decay, Loshchilov & Hutter 2019;
// https://pytorch.org/docs/stable/generated/torch.optim.AdamW.html), written in the operation order of the CPU
// reference (exec/cpu/cpu_ops.cpp), all in fp32, no fused multiply-add:
//   g = grad * grad_scale
//   m = beta1 * m + (1 - beta1) * g
//   v = beta2 * v + (1 - beta2) * g * g
//   p = p - lr * ((m / bc1) / (sqrt(v / bc2) + eps) + wd * p),   bc1 = 1 - beta1^t, bc2 = 1 - beta2^t
// with bc1, bc2 = 1 - std::pow(beta, float(t)) in fp32 and wd = weight_decay where the element decays, else 0.
// DeepSpeed's CPU Adam (csrc/adam/cpu_adam_impl.cpp) computes the same update with precomputed reciprocals and
// fused multiply-adds; we keep the divisions so that an offloaded run reproduces the non-offloaded one bit for
// bit on the CPU backend. The update is bound by memory traffic, so the divisions cost no time (see
// bench/cpu_adam_benchmark.cpp).
struct AdamwHyper {
  float lr = 0.0f;
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float eps = 1e-8f;
  float weight_decay = 0.0f;
  // Multiplies every gradient: 1/loss_scale times the clipping factor, decided across ranks before the update.
  float grad_scale = 1.0f;
  std::int64_t step = 1;  // t, 1 for the first update
};

// Which flat elements take weight decay: the block-major geometry of exec/param_layout.h (embeddings in
// [0, blocks_begin) decay; each block of block_stride elements from blocks_begin on decays in its first
// block_decay elements; [blocks_end, ...) does not). The default decays every element.
struct DecayGeometry {
  std::int64_t blocks_begin = std::numeric_limits<std::int64_t>::max();
  std::int64_t block_stride = 0;
  std::int64_t block_decay = 0;
  std::int64_t blocks_end = std::numeric_limits<std::int64_t>::max();
  // [blocks_end, tail_decay_end) decays too: an untied lm_head before the final norm (param_layout.h).
  std::int64_t tail_decay_end = 0;
};

// The arrays of one update, `count` elements each. Exactly one of grads / grads_bf16 / grads_fp16 is set. params_half (may be
// null: no copy) receives the 16-bit copy of the updated p. flat_base: the flat index (in the DecayGeometry's
// numbering) of element 0, so a rank can update any piece of its partition as soon as that piece has arrived.
// The arrays must not overlap. 64-byte aligned arrays are fastest; any alignment is correct.
struct AdamwTensors {
  float* params = nullptr;
  const float* grads = nullptr;
  const std::uint16_t* grads_bf16 = nullptr;
  const std::uint16_t* grads_fp16 = nullptr;  // IEEE binary16 (fp16 training's gradients, loss-scaled)
  float* exp_avg = nullptr;
  float* exp_avg_sq = nullptr;
  std::uint16_t* params_half = nullptr;
  HalfFormat half_format = HalfFormat::bf16;
  std::int64_t count = 0;
  std::int64_t flat_base = 0;
};

// The optimizer of one rank: a thread count and an instruction set, fixed at construction.
class CpuAdamw {
 public:
  // threads >= 1 (std::invalid_argument otherwise): the calling thread and threads - 1 workers. isa must be one
  // this CPU runs (std::invalid_argument naming the instruction set otherwise). Tests pick the isa to check
  // every path; the engine keeps the default.
  explicit CpuAdamw(int threads, CpuIsa isa = detect_cpu_isa());

  // One update of t.count elements with `threads` threads, which take chunks in turn (about eight a thread) whose
  // bounds are multiples of 64 elements (so no two threads write one cache line of any array when the arrays are
  // 64-byte aligned). Throws std::invalid_argument on a null array, a negative count, both or neither gradient array,
  // step < 1 or an inconsistent geometry. Calls from several threads run one after the other.
  void update(const AdamwTensors& t, const AdamwHyper& hyper, const DecayGeometry& decay = {});
  // Several pieces in one pass of the pool (the threads take chunks of their concatenation): the
  // same per-element result as one update() per piece, without a hand-off to the threads per piece. A rank's
  // partition of a model of many small tensors is hundreds of pieces of a few thousand elements.
  void update(const AdamwTensors* pieces, std::size_t count, const AdamwHyper& hyper, const DecayGeometry& decay = {});

  int threads() const { return pool_.threads(); }
  CpuIsa isa() const { return isa_; }

 private:
  ThreadPool pool_;
  CpuIsa isa_;
};

}  // namespace zeroplan::exec::offload
