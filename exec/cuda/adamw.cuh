// The optimizer side of the step over the flat buffers: parameter initialization (exec/init_rng.h, identical to
// the CPU reference), the global gradient L2 norm (which also detects fp16 overflow: inf/nan propagate), and
// AdamW with fp32 master weights writing the rounded 16-bit parameters. Weight decay follows the layout's
// block geometry (param_layout.h) instead of a per-tensor table, so the update is one launch over the buffer.
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

#include "exec/init_rng.h"

namespace zeroplan::exec::cuda {

// Weight-decay geometry of the flat layout (ParamLayout), plus `base`: the flat index of element 0 of the range
// being updated, so a ZeRO rank can update its own contiguous partition [base, base + n) in place.
struct DecayGeometry {
  std::int64_t blocks_begin, block_stride, block_decay, blocks_end;
  std::int64_t tail_decay_end;  // [blocks_end, tail_decay_end) decays too: an untied lm_head (param_layout.h)
  std::int64_t base = 0;
};

// params[0, count) and master[0, count) (each when not null) = the initialization of hash indices
// [hash_first, hash_first + count) (exec/init_rng.h); elements at or past `live` are 0.
template <typename T>
void init_tensor(T* params, float* master, std::int64_t count, std::int64_t hash_first, std::int64_t live,
                 InitKind kind, std::uint64_t seed, float residual_std, cudaStream_t stream);
// params = round(src) and master = src (each when not null), src fp32 on the device.
template <typename T>
void set_from_fp32(T* params, float* master, const float* src, std::int64_t n, cudaStream_t stream);

// out[0] = sum of squares of g (fp32), through `partials` (kNormPartials floats).
template <typename T>
void grad_norm_squared(float* out, float* partials, const T* g, std::int64_t n, cudaStream_t stream);

// grad_scale folds the loss-scale unscale and the clipping factor; master null means params are fp32 masters.
// G: the gradients' type, T's or fp32 (fp32 gradient accumulation).
template <typename T, typename G>
void adamw_update(T* params, float* master, const G* grads, float* m, float* v, std::int64_t n, float lr, float beta1,
                  float beta2, float eps, float weight_decay, float grad_scale, int t, DecayGeometry decay,
                  cudaStream_t stream);

}  // namespace zeroplan::exec::cuda
