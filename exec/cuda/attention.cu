#include "exec/cuda/attention.cuh"

#include <mutex>
#include <string>
#include <type_traits>
#include <vector>

#include "exec/cuda/cuda_common.cuh"

namespace zeroplan::exec::cuda {

namespace {

using i64 = std::int64_t;
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

// ---------------------------------------------------------------------------------------------------------
// Tensor-core building blocks (PTX ISA, "Matrix multiply-accumulate operation using mma instruction",
// m16n8k16 fragment layouts; ldmatrix for shared-memory -> fragment loads).
// ---------------------------------------------------------------------------------------------------------
constexpr int kTile = 64;      // rows of Q (forward) or K (backward) per block, and of K/V (Q/dO) per step
// Head sizes HD served by the tensor-core path: 64 (GPT-2) and 128 (GPT-3 from 6.7B, Llama). Shared-memory tiles
// are HD columns wide with a row pitch of HD + 8 elements (+16 bytes, so ldmatrix rows hit distinct banks).
template <typename T, int HD>
using TileRow = T[HD + 8];
constexpr int kThreads = 128;  // 4 warps, 16 rows each (backward kernels)
constexpr int kBwdStages = 3;

template <typename T>
__device__ __forceinline__ std::uint32_t pack2(float lo, float hi) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<std::uint32_t*>(&v);
  } else {
    __half2 v = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<std::uint32_t*>(&v);
  }
}

template <typename T>
__device__ __forceinline__ void mma16816(float (&c)[4], const std::uint32_t (&a)[4], std::uint32_t b0, std::uint32_t b1) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  } else {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
}

// 2^x on the special-function unit (ex2.approx.ftz: rel. error ~2^-22, flushes subnormal results, which only
// arise for probabilities below 2^-126). exp2f without --use_fast_math adds range handling around the same op.
__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

__device__ __forceinline__ void ldmatrix_x4(std::uint32_t (&r)[4], const void* smem) {
  const unsigned addr = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
__device__ __forceinline__ void ldmatrix_x4_trans(std::uint32_t (&r)[4], const void* smem) {
  const unsigned addr = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

// 16-byte async copy global -> shared; rows past the end are zero-filled (src-size 0).
__device__ __forceinline__ void cp_async16(void* smem, const void* gmem, bool valid) {
  const unsigned addr = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  const int src_size = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(addr), "l"(gmem), "r"(src_size));
}
__device__ __forceinline__ void cp_async4(void* smem, const void* gmem, bool valid) {
  const unsigned addr = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  const int src_size = valid ? 4 : 0;
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(addr), "l"(gmem), "r"(src_size));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }

// Copies a 64 x HD tile (rows of a row-major matrix with pitch `stride` elements) into shared memory; rows at or
// past rows_valid are zero-filled. Each thread owns one 16-byte column chunk and every 16th row, so the addresses
// are one multiply and then increments (the generic index loop cost ~20 integer instructions per copy; ncu counted
// ~390 instructions per warp and tile beyond the math).
template <typename T, int HD, int ROWS = kTile, int THREADS = kThreads>
__device__ __forceinline__ void load_tile(TileRow<T, HD>* tile, const T* base, i64 stride, int rows_valid) {
  constexpr int kRowStep = THREADS / (HD / 8);
  const int row0 = threadIdx.x / (HD / 8), col = (threadIdx.x % (HD / 8)) * 8;
  const T* src = base + row0 * stride + col;
#pragma unroll
  for (int i = 0; i < ROWS / kRowStep; ++i) {
    const int r = row0 + i * kRowStep;
    const bool valid = r < rows_valid;
    cp_async16(&tile[r][col], valid ? src : base, valid);
    src += kRowStep * stride;
  }
}

// A-operand fragments of a warp's 16 rows x HD columns of a row-major shared tile (HD / 16 k-steps of 16).
template <typename T, int HD>
__device__ __forceinline__ void load_a_frags(std::uint32_t (&f)[HD / 16][4], const TileRow<T, HD>* tile, int row0) {
  const int lane = threadIdx.x % 32;
#pragma unroll
  for (int kk = 0; kk < HD / 16; ++kk)
    ldmatrix_x4(f[kk], &tile[row0 + (lane % 8) + ((lane / 8) % 2) * 8][kk * 16 + (lane / 16) * 8]);
}

// acc[16 x 64] += A (16 x HD, fragments) * tile^T, tile rows = the 64 output columns (S = Q K^T form).
template <typename T, int HD>
__device__ __forceinline__ void mma_a_tileT(float (&acc)[8][4], const std::uint32_t (&a)[HD / 16][4],
                                            const TileRow<T, HD>* tile) {
  const int lane = threadIdx.x % 32;
  // all four B fragments of a k-step are loaded before its eight MMAs, so ldmatrix latency overlaps
#pragma unroll
  for (int kk = 0; kk < HD / 16; ++kk) {
    std::uint32_t r[4][4];
#pragma unroll
    for (int np = 0; np < 4; ++np)
      ldmatrix_x4(r[np], &tile[np * 16 + (lane % 8) + (lane / 16) * 8][kk * 16 + ((lane / 8) % 2) * 8]);
#pragma unroll
    for (int np = 0; np < 4; ++np) {
      mma16816<T>(acc[2 * np], a[kk], r[np][0], r[np][1]);
      mma16816<T>(acc[2 * np + 1], a[kk], r[np][2], r[np][3]);
    }
  }
}

// acc[16 x HD] += P (16 x 64 in C-fragment layout, fp32) * tile, tile rows = the 64 reduction indices (O = P V).
template <typename T, int HD>
__device__ __forceinline__ void mma_c_tile(float (&acc)[HD / 8][4], const float (&p)[8][4],
                                           const TileRow<T, HD>* tile) {
  const int lane = threadIdx.x % 32;
#pragma unroll
  for (int kk = 0; kk < 4; ++kk) {
    // the C layout of two adjacent n-tiles is the A layout of one k-step (FlashAttention-2's register reuse)
    const std::uint32_t a[4] = {pack2<T>(p[2 * kk][0], p[2 * kk][1]), pack2<T>(p[2 * kk][2], p[2 * kk][3]),
                                pack2<T>(p[2 * kk + 1][0], p[2 * kk + 1][1]),
                                pack2<T>(p[2 * kk + 1][2], p[2 * kk + 1][3])};
    std::uint32_t r[HD / 16][4];
#pragma unroll
    for (int np = 0; np < HD / 16; ++np)
      ldmatrix_x4_trans(r[np], &tile[kk * 16 + (lane % 8) + ((lane / 8) % 2) * 8][np * 16 + (lane / 16) * 8]);
#pragma unroll
    for (int np = 0; np < HD / 16; ++np) {
      mma16816<T>(acc[2 * np], a, r[np][0], r[np][1]);
      mma16816<T>(acc[2 * np + 1], a, r[np][2], r[np][3]);
    }
  }
}

// 8 warps of 16 query rows each (128 queries, 2 blocks per SM at <= 128 registers: each K/V tile read from L2
// serves twice the queries of a 4-warp block, which measured slower; bench/exec/NOTES.md v9). Head size 128 doubles
// the output accumulator and the Q fragments (64 + 32 registers): one block per SM, up to 255 registers.
constexpr int kFwdWarps = 8;
constexpr int kFwdRows = 16 * kFwdWarps, kFwdThreads = 32 * kFwdWarps;
template <int HD>
constexpr int kFwdSmem = (kFwdRows + 4 * kTile) * (HD + 8) * 2;

template <typename T, int HD>
__global__ void __launch_bounds__(kFwdThreads, HD == 64 ? 2 : 1)
    flash_forward_kernel(T* out, float* lse, const T* qkv, int Tn, int NH, int NKV, float scale_log2) {
  constexpr int kRows = kFwdRows, kThr = kFwdThreads;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  using Row = TileRow<T, HD>;
  Row* const sQ = reinterpret_cast<Row*>(smem_raw);  // [kRows]
  Row* const sK0 = sQ + kRows;                          // K stage s at sK0 + s * kTile
  Row* const sV0 = sK0 + 2 * kTile;                     // V stage s at sV0 + s * kTile
  const int nqb = (Tn + kRows - 1) / kRows;
  const int qb = nqb - 1 - static_cast<int>(blockIdx.x);  // longest rows first
  const int h = blockIdx.y, b = blockIdx.z;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, tig = lane % 4;
  const i64 stride = static_cast<i64>(NH + 2 * NKV) * HD;
  const int kvh = h / (NH / NKV);  // grouped-query attention: the key/value head of this query head (repeat_kv)
  const T* rows = qkv + static_cast<i64>(b) * Tn * stride;
  const T* qbase = rows + h * HD;
  const T* kbase = rows + (NH + kvh) * HD;
  const T* vbase = rows + (NH + NKV + kvh) * HD;
  const int q0 = qb * kRows;
  const int last_kb = (min(q0 + kRows, Tn) - 1) / kTile;
  const int warp_first = q0 + warp * 16, warp_last = warp_first + 15;

  load_tile<T, HD, kRows, kThr>(sQ, qbase + static_cast<i64>(q0) * stride, stride, Tn - q0);
  load_tile<T, HD, kTile, kThr>(sK0, kbase, stride, Tn);
  load_tile<T, HD, kTile, kThr>(sV0, vbase, stride, Tn);
  cp_async_commit();

  float o[HD / 8][4] = {};
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
  std::uint32_t qf[HD / 16][4];
  const int q_row[2] = {warp_first + g, warp_first + g + 8};

  for (int kb = 0; kb <= last_kb; ++kb) {
    const int stage = kb & 1;
    if (kb < last_kb) {
      load_tile<T, HD, kTile, kThr>(sK0 + (stage ^ 1) * kTile, kbase + static_cast<i64>(kb + 1) * kTile * stride,
                                    stride, Tn - (kb + 1) * kTile);
      load_tile<T, HD, kTile, kThr>(sV0 + (stage ^ 1) * kTile, vbase + static_cast<i64>(kb + 1) * kTile * stride,
                                    stride, Tn - (kb + 1) * kTile);
      cp_async_commit();
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();
    if (kb == 0) load_a_frags<T, HD>(qf, sQ, warp * 16);
    // A tile whose every key lies in this warp's future adds nothing: the warp skips its math (the barriers
    // stay outside the branch, so every thread of the block meets them).
    if (kb * kTile <= warp_last) {
      const Row* sK = sK0 + stage * kTile;
      const Row* sV = sV0 + stage * kTile;
      float s[8][4] = {};
      mma_a_tileT<T, HD>(s, qf, sK);
      // Instruction diet (ncu: the kernel is issue-bound, IPC 2.4): mask only on the diagonal tile, take the row max
      // of the raw scores (scale > 0 keeps the order), and fold the scale into one FFMA before ex2.
      if ((kb + 1) * kTile > warp_first) {  // the tile reaches past this warp's first row (or past T)
#pragma unroll
        for (int j = 0; j < 8; ++j)
#pragma unroll
          for (int e = 0; e < 4; ++e)  // causal mask; also covers keys >= T, which only the last tile holds
            if (kb * kTile + j * 8 + tig * 2 + (e & 1) > q_row[e >> 1]) s[j][e] = -INFINITY;
      }
      float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        mx[0] = fmaxf(mx[0], fmaxf(s[j][0], s[j][1]));
        mx[1] = fmaxf(mx[1], fmaxf(s[j][2], s[j][3]));
      }
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
        mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
      }
      float alpha[2], mnew[2];
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        mnew[r] = fmaxf(m[r], mx[r] * scale_log2);  // running max in scaled log2 units
        const float base = mnew[r] == -INFINITY ? 0.0f : mnew[r];
        alpha[r] = fast_exp2(m[r] - base);
        m[r] = mnew[r];
        mnew[r] = base;
      }
      float rs[2] = {0.0f, 0.0f};
#pragma unroll
      for (int j = 0; j < 8; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          s[j][e] = fast_exp2(fmaf(s[j][e], scale_log2, -mnew[e >> 1]));
          rs[e >> 1] += s[j][e];
        }
#pragma unroll
      for (int r = 0; r < 2; ++r)
        if (alpha[r] != 1.0f)  // the running max moved: rescale this row's accumulator
#pragma unroll
          for (int j = 0; j < HD / 8; ++j) {
            o[j][2 * r] *= alpha[r];
            o[j][2 * r + 1] *= alpha[r];
          }
      l[0] = l[0] * alpha[0] + rs[0];
      l[1] = l[1] * alpha[1] + rs[1];
      mma_c_tile<T, HD>(o, s, sV);
    }
    __syncthreads();
  }
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    l[r] += __shfl_xor_sync(0xffffffffu, l[r], 1);
    l[r] += __shfl_xor_sync(0xffffffffu, l[r], 2);
  }
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    if (q_row[r] >= Tn) continue;
    const float inv = 1.0f / l[r];
    T* orow = out + (static_cast<i64>(b) * Tn + q_row[r]) * NH * HD + h * HD;
#pragma unroll
    for (int j = 0; j < HD / 8; ++j)
      *reinterpret_cast<std::uint32_t*>(orow + j * 8 + tig * 2) = pack2<T>(o[j][2 * r] * inv, o[j][2 * r + 1] * inv);
    if (tig == 0) lse[(static_cast<i64>(b) * NH + h) * Tn + q_row[r]] = (m[r] + log2f(l[r])) * kLn2;
  }
}

// D = rowsum(dO * O) per (b, h, t), FlashAttention-2 Algorithm 2 line 4.
template <typename T>
__global__ void attention_rowsum_kernel(float* d_rowsum, const T* dout, const T* out, int B, int Tn, int NH, int HS) {
  const i64 idx = static_cast<i64>(blockIdx.x) * blockDim.x + threadIdx.x;  // over B*T*NH, h fastest
  if (idx >= static_cast<i64>(B) * Tn * NH) return;
  const int h = static_cast<int>(idx % NH);
  const i64 bt = idx / NH;
  const i64 C = static_cast<i64>(NH) * HS;
  const T* o = out + bt * C + h * HS;
  const T* d = dout + bt * C + h * HS;
  float acc = 0.0f;
  for (int i = 0; i < HS; i += Pack<T>::kSize) {
    const Pack<T> po = Pack<T>::load(o + i), pd = Pack<T>::load(d + i);
#pragma unroll
    for (int j = 0; j < Pack<T>::kSize; ++j) acc += to_f(po.v[j]) * to_f(pd.v[j]);
  }
  const i64 b = bt / Tn, t = bt % Tn;
  d_rowsum[(b * NH + h) * Tn + t] = acc;
}

// dK and dV: a block owns 64 keys of one key/value head (4 warps of 16; 8 warps measured slower,
// bench/exec/NOTES.md v10) and walks the query tiles from the diagonal on; flash_backward_dq_kernel computes dQ from
// its own recomputation, so neither kernel needs atomics (a fused kernel accumulating dQ with fp32 atomics measured
// slower, NOTES v10). Grouped-query attention: the key/value head feeds the NH/NKV query heads of its group, so its
// dK and dV are sums over them (the backward of transformers' repeat_kv). The block walks (head of the group, query
// tile) as one sequence, heads in ascending order, each from the diagonal on, accumulating into the same registers:
// a fixed summation order without atomics, so dK and dV stay bit-reproducible, and the Q/dO pipeline runs across the
// head boundaries. With NKV == NH (GPT-2) the sequence is the one head's query tiles, as before.
// Head size 128: the K and V fragments (64 registers) are not kept across query tiles but read again from the
// block's shared K and V before each use, which leaves the dK and dV accumulators (128 registers) room.
template <int HD>
constexpr int kBwdSmem = (2 * kTile + 2 * kBwdStages * kTile) * (HD + 8) * 2 + 2 * kBwdStages * kTile * 4;

template <typename T, int HD>
__global__ void __launch_bounds__(kThreads) flash_backward_dkdv_kernel(T* dqkv, const float* d_rowsum, const T* dout,
                                                                       const T* qkv, const float* lse, int Tn, int NH,
                                                                       int NKV, float scale) {
  constexpr int kKeys = kTile, kThr = kThreads;
  constexpr bool kKeepFrags = HD == 64;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  using Row = TileRow<T, HD>;
  Row* const sK = reinterpret_cast<Row*>(smem_raw);  // [kKeys]
  Row* const sV = sK + kKeys;                          // [kKeys]
  // Q/dO (and their logsumexp and D) in kBwdStages stages: the tile two steps ahead loads while one computes
  Row* const sQ0 = sV + kKeys;                   // stage s at sQ0 + s * kTile
  Row* const sdO0 = sQ0 + kBwdStages * kTile;    // stage s at sdO0 + s * kTile
  float* const sLse = reinterpret_cast<float*>(sdO0 + kBwdStages * kTile);  // [kBwdStages][64], natural log
  float* const sD = sLse + kBwdStages * kTile;                             // [kBwdStages][64]

  const int nqb = (Tn + kTile - 1) / kTile;
  const int kb = blockIdx.x;  // blocks with small kb have the most query tiles and are scheduled first
  const int kvh = blockIdx.y, b = blockIdx.z;
  const int group = NH / NKV;  // query heads kvh * group .. kvh * group + group - 1 read this key/value head
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, tig = lane % 4;
  const i64 stride = static_cast<i64>(NH + 2 * NKV) * HD, out_stride = static_cast<i64>(NH) * HD;
  const T* rows = qkv + static_cast<i64>(b) * Tn * stride;
  const T* kbase = rows + (NH + kvh) * HD;
  const T* vbase = rows + (NH + NKV + kvh) * HD;
  const float scale_log2 = scale * kLog2e;
  const int k0 = kb * kKeys;
  const int qb_first = k0 / kTile;
  const int warp_first_key = k0 + warp * 16;
  const int tiles_per_head = nqb - qb_first, steps = group * tiles_per_head;

  // Loads step (query head of the group, query tile qb) into a stage. Steps are loaded in order, so the next one
  // is tracked by its tile and its head's base pointers, which move on by one head when the tiles wrap (no division
  // or pointer arithmetic per step beyond the single-head kernel's).
  const int h_first = kvh * group;
  const T* qbase = rows + h_first * HD;
  const T* dobase = dout + static_cast<i64>(b) * Tn * out_stride + h_first * HD;
  const float* lse_row = lse + (static_cast<i64>(b) * NH + h_first) * Tn;
  const float* d_row = d_rowsum + (static_cast<i64>(b) * NH + h_first) * Tn;
  int next_qb = qb_first;
  auto load_next_step = [&](int stage) {
    const int qb = next_qb;
    load_tile<T, HD, kTile, kThr>(sQ0 + stage * kTile, qbase + static_cast<i64>(qb) * kTile * stride, stride,
                                  Tn - qb * kTile);
    load_tile<T, HD, kTile, kThr>(sdO0 + stage * kTile, dobase + static_cast<i64>(qb) * kTile * out_stride,
                                  out_stride, Tn - qb * kTile);
    // asynchronous like the tiles: a plain load here stalled the loading threads on the critical path
    // (ncu: long-scoreboard stalls); rows past T are zero-filled
    for (int i = threadIdx.x; i < kTile; i += kThr) {
      const int q = qb * kTile + i;
      const bool valid = q < Tn;
      cp_async4(&sLse[stage * kTile + i], lse_row + (valid ? q : 0), valid);
      cp_async4(&sD[stage * kTile + i], d_row + (valid ? q : 0), valid);
    }
    if (++next_qb == nqb) {  // the group's next query head (past the last one: never loaded)
      next_qb = qb_first;
      qbase += HD;
      dobase += HD;
      lse_row += Tn;
      d_row += Tn;
    }
  };

  load_tile<T, HD, kKeys, kThr>(sK, kbase + static_cast<i64>(k0) * stride, stride, Tn - k0);
  load_tile<T, HD, kKeys, kThr>(sV, vbase + static_cast<i64>(k0) * stride, stride, Tn - k0);
  load_next_step(0);
  cp_async_commit();
  if (1 < steps) load_next_step(1);
  cp_async_commit();  // possibly empty: every iteration waits on the same group count

  std::uint32_t kf[HD / 16][4], vf[HD / 16][4];
  float dk[HD / 8][4] = {}, dv[HD / 8][4] = {};
  const int key[2] = {warp_first_key + g, warp_first_key + g + 8};

  for (int step = 0, qb = qb_first; step < steps; ++step) {
    const int stage = step % kBwdStages;
    if (step + 2 < steps) load_next_step((step + 2) % kBwdStages);
    cp_async_commit();
    cp_async_wait<2>();  // this iteration's group is complete; the two after it may be in flight
    __syncthreads();
    if (kKeepFrags && step == 0) {
      load_a_frags<T, HD>(kf, sK, warp * 16);
      load_a_frags<T, HD>(vf, sV, warp * 16);
    }
    const Row* sQ = sQ0 + stage * kTile;
    const Row* sdO = sdO0 + stage * kTile;
    // a tile whose every query precedes this warp's keys adds nothing
    if (qb * kTile + kTile - 1 >= warp_first_key) {
      // S^T = K Q^T and dP^T = V dO^T: rows are this warp's 16 keys, columns the tile's 64 queries
      float p[8][4] = {}, ds[8][4] = {};
      if (!kKeepFrags) load_a_frags<T, HD>(kf, sK, warp * 16);
      mma_a_tileT<T, HD>(p, kf, sQ);
      if (!kKeepFrags) load_a_frags<T, HD>(vf, sV, warp * 16);
      mma_a_tileT<T, HD>(ds, vf, sdO);
      // per-column (query) logsumexp (log2 units) and D, read once for both rows of each fragment
      const bool need_mask = qb * kTile < k0 + kKeys || (qb + 1) * kTile > Tn;  // diagonal region, or past T
#pragma unroll
      for (int j = 0; j < 8; ++j)
#pragma unroll
        for (int c = 0; c < 2; ++c) {
          const int ql = j * 8 + tig * 2 + c;
          const float lse2 = sLse[stage * kTile + ql] * kLog2e;
          const float dsum = sD[stage * kTile + ql];
#pragma unroll
          for (int r = 0; r < 2; ++r) {
            const int e = 2 * r + c;
            float pv = fast_exp2(fmaf(p[j][e], scale_log2, -lse2));
            if (need_mask) {
              const int q = qb * kTile + ql;
              if (q < key[r] || q >= Tn) pv = 0.0f;
            }
            p[j][e] = pv;
            ds[j][e] = pv * scale * (ds[j][e] - dsum);  // dS * scale
          }
        }
      mma_c_tile<T, HD>(dv, p, sdO);  // dV += P^T dO
      mma_c_tile<T, HD>(dk, ds, sQ);  // dK += dS^T Q
    }  // warp has live keys
    __syncthreads();
    if (++qb == nqb) qb = qb_first;  // the next head of the group starts again at the diagonal
  }
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    if (key[r] >= Tn) continue;
    T* row = dqkv + (static_cast<i64>(b) * Tn + key[r]) * stride;
#pragma unroll
    for (int j = 0; j < HD / 8; ++j) {
      *reinterpret_cast<std::uint32_t*>(row + (NH + kvh) * HD + j * 8 + tig * 2) =
          pack2<T>(dk[j][2 * r], dk[j][2 * r + 1]);
      *reinterpret_cast<std::uint32_t*>(row + (NH + NKV + kvh) * HD + j * 8 + tig * 2) =
          pack2<T>(dv[j][2 * r], dv[j][2 * r + 1]);
    }
  }
}

// dQ without atomics (FlashAttention-2 Algorithm 2's dQ loop as its own kernel, as in the Triton tutorial's
// fused attention): a block owns 64 queries (4 warps x 16 rows), walks the key tiles up to the diagonal and
// recomputes S = Q K^T and dP = dO V^T; dS = P (dP - D) * scale stays in registers (its C layout is the A
// layout of dQ += dS K), and dQ is written once, in the model precision.
template <int HD>
constexpr int kDqSmem = 6 * kTile * (HD + 8) * 2;

template <typename T, int HD>
__global__ void __launch_bounds__(kThreads, 2) flash_backward_dq_kernel(T* dqkv, float* d_rowsum, const T* dout,
                                                                        const T* qkv, const T* out, const float* lse,
                                                                        int Tn, int NH, int NKV, float scale) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  using Row = TileRow<T, HD>;
  Row* const sQ = reinterpret_cast<Row*>(smem_raw);
  Row* const sdO = sQ + kTile;
  Row* const sK0 = sdO + kTile;     // K stage s at sK0 + s * kTile
  Row* const sV0 = sK0 + 2 * kTile;  // V stage s at sV0 + s * kTile
  const int nqb = (Tn + kTile - 1) / kTile;
  const int qb = nqb - 1 - static_cast<int>(blockIdx.x);  // longest rows first
  const int h = blockIdx.y, b = blockIdx.z;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, tig = lane % 4;
  const i64 stride = static_cast<i64>(NH + 2 * NKV) * HD, C = static_cast<i64>(NH) * HD;  // qkv and out rows
  const int kvh = h / (NH / NKV);  // grouped-query attention: the key/value head of this query head
  const T* rows = qkv + static_cast<i64>(b) * Tn * stride;
  const T* qbase = rows + h * HD;
  const T* kbase = rows + (NH + kvh) * HD;
  const T* vbase = rows + (NH + NKV + kvh) * HD;
  const T* dobase = dout + static_cast<i64>(b) * Tn * C + h * HD;
  const int q0 = qb * kTile;
  const float scale_log2 = scale * kLog2e;

  load_tile<T, HD>(sQ, qbase + static_cast<i64>(q0) * stride, stride, Tn - q0);
  load_tile<T, HD>(sdO, dobase + static_cast<i64>(q0) * C, C, Tn - q0);
  load_tile<T, HD>(sK0, kbase, stride, Tn);
  load_tile<T, HD>(sV0, vbase, stride, Tn);
  cp_async_commit();

  const int q_row[2] = {q0 + warp * 16 + g, q0 + warp * 16 + g + 8};
  float lse2[2], dsum[2] = {0.0f, 0.0f};
#pragma unroll
  for (int r = 0; r < 2; ++r) lse2[r] = lse[(static_cast<i64>(b) * NH + h) * Tn + min(q_row[r], Tn - 1)] * kLog2e;
  std::uint32_t qf[HD / 16][4], dof[HD / 16][4];
  float dq[HD / 8][4] = {};

  for (int kb = 0; kb <= qb; ++kb) {
    const int stage = kb & 1;
    if (kb < qb) {
      load_tile<T, HD>(sK0 + (stage ^ 1) * kTile, kbase + static_cast<i64>(kb + 1) * kTile * stride, stride,
                       Tn - (kb + 1) * kTile);
      load_tile<T, HD>(sV0 + (stage ^ 1) * kTile, vbase + static_cast<i64>(kb + 1) * kTile * stride, stride,
                       Tn - (kb + 1) * kTile);
      cp_async_commit();
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();
    if (kb == 0) {
      load_a_frags<T, HD>(qf, sQ, warp * 16);
      load_a_frags<T, HD>(dof, sdO, warp * 16);
      // D = rowsum(dO * O) for this warp's rows (FlashAttention-2 Algorithm 2 line 4), computed here instead of in
      // a separate kernel: each lane of a quad takes a quarter of the HD columns, the quad sums; the dK/dV kernel,
      // which runs after this one, reads it from d_rowsum.
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        float acc = 0.0f;
        if (q_row[r] < Tn) {
          constexpr int kQuarter = HD / 4;
          const T* orow = out + (static_cast<i64>(b) * Tn + q_row[r]) * C + h * HD + tig * kQuarter;
#pragma unroll
          for (int part = 0; part < kQuarter / 8; ++part) {
            const Pack<T> po = Pack<T>::load(orow + part * 8);
#pragma unroll
            for (int e = 0; e < 8; ++e)
              acc += to_f(po.v[e]) * to_f(sdO[warp * 16 + g + 8 * r][tig * kQuarter + part * 8 + e]);
          }
        }
        acc += __shfl_xor_sync(0xffffffffu, acc, 1);
        acc += __shfl_xor_sync(0xffffffffu, acc, 2);
        dsum[r] = acc;
        if (tig == 0 && q_row[r] < Tn) d_rowsum[(static_cast<i64>(b) * NH + h) * Tn + q_row[r]] = acc;
      }
    }
    const Row* sK = sK0 + stage * kTile;
    const Row* sV = sV0 + stage * kTile;
    float sc[8][4] = {}, ds[8][4] = {};
    mma_a_tileT<T, HD>(sc, qf, sK);   // S = Q K^T
    mma_a_tileT<T, HD>(ds, dof, sV);  // dP = dO V^T
    const bool diagonal = kb == qb;
#pragma unroll
    for (int j = 0; j < 8; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int r = e >> 1;
        float pv = fast_exp2(fmaf(sc[j][e], scale_log2, -lse2[r]));
        if (diagonal && kb * kTile + j * 8 + tig * 2 + (e & 1) > q_row[r]) pv = 0.0f;  // causal; keys >= T too
        ds[j][e] = pv * scale * (ds[j][e] - dsum[r]);
      }
    mma_c_tile<T, HD>(dq, ds, sK);  // dQ += dS K
    __syncthreads();
  }
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    if (q_row[r] >= Tn) continue;
    T* row = dqkv + (static_cast<i64>(b) * Tn + q_row[r]) * stride + h * HD;
#pragma unroll
    for (int j = 0; j < HD / 8; ++j)
      *reinterpret_cast<std::uint32_t*>(row + j * 8 + tig * 2) = pack2<T>(dq[j][2 * r], dq[j][2 * r + 1]);
  }
}

// ---------------------------------------------------------------------------------------------------------
// Plain path (fp32, any head size <= 256): one warp per query row, online softmax in fp32. Query head h reads
// key/value head h / (NH / NKV); the dK/dV kernel owns one key row of one key/value head and sums over the query
// heads of its group in ascending order (no atomics).
// ---------------------------------------------------------------------------------------------------------
constexpr int kMaxPerLane = 8;  // head size up to 256

template <typename T>
__global__ void plain_forward_kernel(T* out, float* lse, const T* qkv, int B, int Tn, int NH, int NKV, int HS,
                                     float scale) {
  const i64 row = static_cast<i64>(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;  // (b, h, t)
  const int lane = threadIdx.x % 32;
  if (row >= static_cast<i64>(B) * NH * Tn) return;
  const int t = static_cast<int>(row % Tn), h = static_cast<int>((row / Tn) % NH);
  const i64 b = row / (static_cast<i64>(Tn) * NH);
  const int kvh = h / (NH / NKV);
  const i64 stride = static_cast<i64>(NH + 2 * NKV) * HS, C = static_cast<i64>(NH) * HS;
  const i64 k_col = static_cast<i64>(NH + kvh) * HS, v_col = static_cast<i64>(NH + NKV + kvh) * HS;
  const T* q = qkv + (b * Tn + t) * stride + h * HS;
  float qv[kMaxPerLane], acc[kMaxPerLane];
  for (int i = 0; i < kMaxPerLane; ++i) {
    const int d = lane + 32 * i;
    qv[i] = d < HS ? to_f(q[d]) : 0.0f;
    acc[i] = 0.0f;
  }
  float m = -INFINITY, l = 0.0f;
  for (int u = 0; u <= t; ++u) {
    const T* k = qkv + (b * Tn + u) * stride + k_col;
    const T* v = qkv + (b * Tn + u) * stride + v_col;
    float dot = 0.0f;
    for (int i = 0; i < kMaxPerLane; ++i) {
      const int d = lane + 32 * i;
      if (d < HS) dot += qv[i] * to_f(k[d]);
    }
    const float s = warp_sum(dot) * scale;
    const float mn = fmaxf(m, s);
    const float alpha = expf(m - mn), p = expf(s - mn);
    l = l * alpha + p;
    for (int i = 0; i < kMaxPerLane; ++i) {
      const int d = lane + 32 * i;
      if (d < HS) acc[i] = acc[i] * alpha + p * to_f(v[d]);
    }
    m = mn;
  }
  T* o = out + (b * Tn + t) * C + h * HS;
  for (int i = 0; i < kMaxPerLane; ++i) {
    const int d = lane + 32 * i;
    if (d < HS) o[d] = from_f<T>(acc[i] / l);
  }
  if (lane == 0) lse[(b * NH + h) * Tn + t] = m + logf(l);
}

// dQ for one query row per warp.
template <typename T>
__global__ void plain_backward_dq_kernel(T* dqkv, const float* d_rowsum, const T* dout, const T* qkv,
                                         const float* lse, int B, int Tn, int NH, int NKV, int HS, float scale) {
  const i64 row = static_cast<i64>(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= static_cast<i64>(B) * NH * Tn) return;
  const int t = static_cast<int>(row % Tn), h = static_cast<int>((row / Tn) % NH);
  const i64 b = row / (static_cast<i64>(Tn) * NH);
  const int kvh = h / (NH / NKV);
  const i64 stride = static_cast<i64>(NH + 2 * NKV) * HS, C = static_cast<i64>(NH) * HS;
  const i64 k_col = static_cast<i64>(NH + kvh) * HS, v_col = static_cast<i64>(NH + NKV + kvh) * HS;
  const T* q = qkv + (b * Tn + t) * stride + h * HS;
  const T* dO = dout + (b * Tn + t) * C + h * HS;
  const float L = lse[(b * NH + h) * Tn + t], D = d_rowsum[(b * NH + h) * Tn + t];
  float qv[kMaxPerLane], dov[kMaxPerLane], dq[kMaxPerLane];
  for (int i = 0; i < kMaxPerLane; ++i) {
    const int d = lane + 32 * i;
    qv[i] = d < HS ? to_f(q[d]) : 0.0f;
    dov[i] = d < HS ? to_f(dO[d]) : 0.0f;
    dq[i] = 0.0f;
  }
  for (int u = 0; u <= t; ++u) {
    const T* k = qkv + (b * Tn + u) * stride + k_col;
    const T* v = qkv + (b * Tn + u) * stride + v_col;
    float s = 0.0f, dp = 0.0f;
    for (int i = 0; i < kMaxPerLane; ++i) {
      const int d = lane + 32 * i;
      if (d < HS) {
        s += qv[i] * to_f(k[d]);
        dp += dov[i] * to_f(v[d]);
      }
    }
    s = warp_sum(s);
    dp = warp_sum(dp);
    const float p = expf(s * scale - L);
    const float ds = p * (dp - D) * scale;
    for (int i = 0; i < kMaxPerLane; ++i) {
      const int d = lane + 32 * i;
      if (d < HS) dq[i] += ds * to_f(k[d]);
    }
  }
  T* dst = dqkv + (b * Tn + t) * stride + h * HS;
  for (int i = 0; i < kMaxPerLane; ++i) {
    const int d = lane + 32 * i;
    if (d < HS) dst[d] = from_f<T>(dq[i]);
  }
}

// dK, dV for one key row of one key/value head per warp, summed over the query heads of its group.
template <typename T>
__global__ void plain_backward_dkv_kernel(T* dqkv, const float* d_rowsum, const T* dout, const T* qkv,
                                          const float* lse, int B, int Tn, int NH, int NKV, int HS, float scale) {
  const i64 row = static_cast<i64>(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;  // (b, kv head, u)
  const int lane = threadIdx.x % 32;
  if (row >= static_cast<i64>(B) * NKV * Tn) return;
  const int u = static_cast<int>(row % Tn), kvh = static_cast<int>((row / Tn) % NKV);
  const i64 b = row / (static_cast<i64>(Tn) * NKV);
  const int group = NH / NKV;
  const i64 stride = static_cast<i64>(NH + 2 * NKV) * HS, C = static_cast<i64>(NH) * HS;
  const i64 k_col = static_cast<i64>(NH + kvh) * HS, v_col = static_cast<i64>(NH + NKV + kvh) * HS;
  const T* k = qkv + (b * Tn + u) * stride + k_col;
  const T* v = qkv + (b * Tn + u) * stride + v_col;
  float kv[kMaxPerLane], vv[kMaxPerLane], dk[kMaxPerLane], dv[kMaxPerLane];
  for (int i = 0; i < kMaxPerLane; ++i) {
    const int d = lane + 32 * i;
    kv[i] = d < HS ? to_f(k[d]) : 0.0f;
    vv[i] = d < HS ? to_f(v[d]) : 0.0f;
    dk[i] = dv[i] = 0.0f;
  }
  for (int h = kvh * group; h < (kvh + 1) * group; ++h)
    for (int t = u; t < Tn; ++t) {
      const T* q = qkv + (b * Tn + t) * stride + h * HS;
      const T* dO = dout + (b * Tn + t) * C + h * HS;
      float s = 0.0f, dp = 0.0f;
      for (int i = 0; i < kMaxPerLane; ++i) {
        const int d = lane + 32 * i;
        if (d < HS) {
          s += to_f(q[d]) * kv[i];
          dp += to_f(dO[d]) * vv[i];
        }
      }
      s = warp_sum(s);
      dp = warp_sum(dp);
      const float p = expf(s * scale - lse[(b * NH + h) * Tn + t]);
      const float ds = p * (dp - d_rowsum[(b * NH + h) * Tn + t]) * scale;
      for (int i = 0; i < kMaxPerLane; ++i) {
        const int d = lane + 32 * i;
        if (d < HS) {
          dv[i] += p * to_f(dO[d]);
          dk[i] += ds * to_f(q[d]);
        }
      }
    }
  T* dst = dqkv + (b * Tn + u) * stride;
  for (int i = 0; i < kMaxPerLane; ++i) {
    const int d = lane + 32 * i;
    if (d < HS) {
      dst[k_col + d] = from_f<T>(dk[i]);
      dst[v_col + d] = from_f<T>(dv[i]);
    }
  }
}

// Kernel attributes (here: dynamic shared memory above the 48 KiB default) belong to a device. A launcher
// configures its kernels on each device before its first launch there, once per device (a table per launcher
// and type, guarded by a mutex, so threads driving different GPUs of one process do not race).
class PerDeviceOnce {
 public:
  template <typename Configure>
  void operator()(Configure&& configure) {
    int device = 0;
    CUDA_CHECK(cudaGetDevice(&device));
    std::lock_guard<std::mutex> lock(mutex_);
    if (device >= static_cast<int>(done_.size())) done_.resize(device + 1, false);
    if (done_[device]) return;
    configure();  // a throw leaves the device unmarked
    done_[device] = true;
  }

 private:
  std::mutex mutex_;
  std::vector<bool> done_;
};

// The tensor-core kernels of one head size: each launcher configures its kernels once per device (a table per
// type and head size).
template <typename T, int HD>
void flash_forward(T* out, float* lse, const T* qkv, int B, int Tn, int NH, int NKV, float scale,
                   cudaStream_t stream) {
  static PerDeviceOnce configured;
  configured([] {
    CUDA_CHECK(cudaFuncSetAttribute(flash_forward_kernel<T, HD>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    kFwdSmem<HD>));
    CUDA_CHECK(cudaFuncSetAttribute(flash_forward_kernel<T, HD>, cudaFuncAttributePreferredSharedMemoryCarveout,
                                    static_cast<int>(cudaSharedmemCarveoutMaxShared)));
  });
  dim3 grid((Tn + kFwdRows - 1) / kFwdRows, NH, B);
  flash_forward_kernel<T, HD><<<grid, kFwdThreads, kFwdSmem<HD>, stream>>>(out, lse, qkv, Tn, NH, NKV,
                                                                           scale * kLog2e);
  CUDA_CHECK_LAUNCH();
}

template <typename T, int HD>
void flash_backward(T* dqkv, float* d_rowsum, const T* dout, const T* qkv, const T* out, const float* lse, int B,
                    int Tn, int NH, int NKV, float scale, cudaStream_t stream) {
  static PerDeviceOnce configured;
  configured([] {
    CUDA_CHECK(cudaFuncSetAttribute(flash_backward_dq_kernel<T, HD>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    kDqSmem<HD>));
    CUDA_CHECK(cudaFuncSetAttribute(flash_backward_dkdv_kernel<T, HD>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    kBwdSmem<HD>));
  });
  const int tiles = (Tn + kTile - 1) / kTile;
  // dQ first: it also computes D = rowsum(dO * O), which the dK/dV kernel reads (stream order). dQ has a block per
  // query head, dK/dV one per key/value head (each summing over its group's query heads).
  flash_backward_dq_kernel<T, HD><<<dim3(tiles, NH, B), kThreads, kDqSmem<HD>, stream>>>(dqkv, d_rowsum, dout, qkv,
                                                                                        out, lse, Tn, NH, NKV, scale);
  CUDA_CHECK_LAUNCH();
  flash_backward_dkdv_kernel<T, HD><<<dim3(tiles, NKV, B), kThreads, kBwdSmem<HD>, stream>>>(dqkv, d_rowsum, dout,
                                                                                            qkv, lse, Tn, NH, NKV,
                                                                                            scale);
  CUDA_CHECK_LAUNCH();
}

void check_heads(int NH, int NKV, int HS) {
  if (NH <= 0 || NKV <= 0 || NH % NKV != 0)
    throw CudaError("attention: " + std::to_string(NH) + " query heads do not split into groups over " +
                    std::to_string(NKV) + " key/value heads");
  if (HS > 32 * kMaxPerLane) throw CudaError("attention: head size above 256 is not supported");
}

}  // namespace

template <typename T>
bool attention_uses_tensor_cores(int head_size) {
  return !std::is_same_v<T, float> && (head_size == 64 || head_size == 128);
}

template <typename T>
void attention_forward(T* out, float* lse, const T* qkv, int B, int Tn, int NH, int NKV, int HS,
                       cudaStream_t stream) {
  check_heads(NH, NKV, HS);
  const float scale = 1.0f / sqrtf(static_cast<float>(HS));
  if constexpr (!std::is_same_v<T, float>) {
    if (HS == 64) return flash_forward<T, 64>(out, lse, qkv, B, Tn, NH, NKV, scale, stream);
    if (HS == 128) return flash_forward<T, 128>(out, lse, qkv, B, Tn, NH, NKV, scale, stream);
  }
  const i64 rows = static_cast<i64>(B) * NH * Tn;
  plain_forward_kernel<T><<<ceil_div(rows, 4), 128, 0, stream>>>(out, lse, qkv, B, Tn, NH, NKV, HS, scale);
  CUDA_CHECK_LAUNCH();
}

template <typename T>
void attention_backward(T* dqkv, float* d_rowsum, const T* dout, const T* qkv, const T* out, const float* lse, int B,
                        int Tn, int NH, int NKV, int HS, cudaStream_t stream) {
  check_heads(NH, NKV, HS);
  const float scale = 1.0f / sqrtf(static_cast<float>(HS));
  if constexpr (!std::is_same_v<T, float>) {
    if (HS == 64) return flash_backward<T, 64>(dqkv, d_rowsum, dout, qkv, out, lse, B, Tn, NH, NKV, scale, stream);
    if (HS == 128) return flash_backward<T, 128>(dqkv, d_rowsum, dout, qkv, out, lse, B, Tn, NH, NKV, scale, stream);
  }
  if (HS % Pack<T>::kSize != 0) throw CudaError("attention_backward: head size must be a multiple of the 16-byte pack");
  const i64 rows = static_cast<i64>(B) * NH * Tn, kv_rows = static_cast<i64>(B) * NKV * Tn;
  attention_rowsum_kernel<T><<<ceil_div(rows, 256), 256, 0, stream>>>(d_rowsum, dout, out, B, Tn, NH, HS);
  CUDA_CHECK_LAUNCH();
  plain_backward_dq_kernel<T><<<ceil_div(rows, 4), 128, 0, stream>>>(dqkv, d_rowsum, dout, qkv, lse, B, Tn, NH, NKV,
                                                                     HS, scale);
  CUDA_CHECK_LAUNCH();
  plain_backward_dkv_kernel<T><<<ceil_div(kv_rows, 4), 128, 0, stream>>>(dqkv, d_rowsum, dout, qkv, lse, B, Tn, NH,
                                                                         NKV, HS, scale);
  CUDA_CHECK_LAUNCH();
}

#define ZP_INSTANTIATE(T)                                                                                       \
  template void attention_forward<T>(T*, float*, const T*, int, int, int, int, int, cudaStream_t);              \
  template void attention_backward<T>(T*, float*, const T*, const T*, const T*, const float*, int, int, int, int, \
                                      int, cudaStream_t);                                                       \
  template bool attention_uses_tensor_cores<T>(int);
ZP_INSTANTIATE(float)
ZP_INSTANTIATE(__half)
ZP_INSTANTIATE(__nv_bfloat16)
#undef ZP_INSTANTIATE

}  // namespace zeroplan::exec::cuda
