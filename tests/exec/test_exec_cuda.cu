// GPU tests: every CUDA launcher against the CPU reference operator of the same name, on fresh random inputs,
// then a whole training step of a small model against the CPU trainer. Each test skips without a GPU.
// Tolerances (relative L2 error ||gpu - ref|| / ||ref||): fp32 kernels 1e-5..1e-4 (summation order);
// bf16 kernels 1e-2 (8-bit mantissa operands, fp32 accumulation); whole-step bf16 gradients 6e-2 (two layers of
// bf16 activations and bf16 gradient storage).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <random>
#include <string>
#include <type_traits>
#include <utility>

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <gtest/gtest.h>

#include <filesystem>

#include "exec/activation_accounting.h"
#include "exec/cpu/cpu_ops.h"
#include "exec/cuda/adamw.cuh"
#include "exec/cuda/attention.cuh"
#include "exec/cuda/crossentropy.cuh"
#include "exec/cuda/cuda_check.h"
#include "exec/cuda/cuda_trainer.h"
#include "exec/cuda/device_allocator.h"
#include "exec/cuda/encoder.cuh"
#include "exec/cuda/gelu.cuh"
#include "exec/cuda/layernorm.cuh"
#include "exec/cuda/matmul.cuh"
#include "exec/cuda/rmsnorm.cuh"
#include "exec/cuda/rope.cuh"
#include "exec/cuda/swiglu.cuh"
#include "exec/token_data.h"

using namespace zeroplan::exec;

namespace {

#define REQUIRE_GPU()                                      \
  do {                                                     \
    std::string why;                                       \
    if (!cuda_device_available(&why)) GTEST_SKIP() << why; \
  } while (0)

std::vector<float> randn(std::size_t n, unsigned seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

template <typename T>
T to_t(float x) {
  if constexpr (std::is_same_v<T, float>) return x;
  else if constexpr (std::is_same_v<T, __half>) return __float2half(x);
  else return __float2bfloat16(x);
}
template <typename T>
float from_t(T x) {
  if constexpr (std::is_same_v<T, float>) return x;
  else if constexpr (std::is_same_v<T, __half>) return __half2float(x);
  else return __bfloat162float(x);
}

// Device buffer of T, filled from floats (rounded to T); the host copy keeps the rounded values so the CPU
// reference sees exactly the GPU's inputs.
template <typename T>
struct Buf {
  T* d = nullptr;
  std::size_t n = 0;
  explicit Buf(std::size_t count) : n(count) {
    CUDA_CHECK(cudaMalloc(&d, n * sizeof(T)));
    poison();
  }
  explicit Buf(std::vector<float>& host) : Buf(host.size()) { upload(host); }
  ~Buf() { cudaFree(d); }
  void upload(std::vector<float>& host) {  // rounds host in place to T precision
    std::vector<T> t(n);
    for (std::size_t i = 0; i < n; ++i) {
      t[i] = to_t<T>(host[i]);
      host[i] = from_t<T>(t[i]);
    }
    CUDA_CHECK(cudaMemcpy(d, t.data(), n * sizeof(T), cudaMemcpyHostToDevice));
  }
  void poison() { CUDA_CHECK(cudaMemset(d, 0x7F, n * sizeof(T))); }  // NaN-ish garbage: unwritten output shows
  std::vector<float> get() const {
    std::vector<T> t(n);
    CUDA_CHECK(cudaDeviceSynchronize());
    CUDA_CHECK(cudaMemcpy(t.data(), d, n * sizeof(T), cudaMemcpyDeviceToHost));
    std::vector<float> out(n);
    for (std::size_t i = 0; i < n; ++i) out[i] = from_t<T>(t[i]);
    return out;
  }
};

// Where two runs' parameters part: how many elements differ, the first index and both values (the index
// names the tensor through the trainer's ParamLayout); "equal" when none does.
std::string differing_elements(const std::vector<float>& got, const std::vector<float>& ref) {
  if (got.size() != ref.size()) return "sizes " + std::to_string(got.size()) + " and " + std::to_string(ref.size());
  std::size_t count = 0, first = 0;
  for (std::size_t i = 0; i < got.size(); ++i)
    if (std::memcmp(&got[i], &ref[i], sizeof(float)) != 0 && count++ == 0) first = i;
  if (count == 0) return "equal";
  char text[160];
  std::snprintf(text, sizeof text, "%zu of %zu elements differ, the first at %zu: %.9g against %.9g", count,
                got.size(), first, got[first], ref[first]);
  return text;
}

double rel_err(const std::vector<float>& got, const std::vector<float>& ref) {
  double d = 0, r = 0;
  for (std::size_t i = 0; i < ref.size(); ++i) {
    if (!std::isfinite(got[i])) return INFINITY;
    d += (static_cast<double>(got[i]) - ref[i]) * (static_cast<double>(got[i]) - ref[i]);
    r += static_cast<double>(ref[i]) * ref[i];
  }
  return std::sqrt(d / std::max(r, 1e-30));
}

template <typename T>
double tol(double fp32, double half) {
  return std::is_same_v<T, float> ? fp32 : half;
}

template <typename T>
class KernelTest : public ::testing::Test {};
using Types = ::testing::Types<float, __nv_bfloat16, __half>;
TYPED_TEST_SUITE(KernelTest, Types);

TYPED_TEST(KernelTest, LayerNormForwardBackward) {
  REQUIRE_GPU();
  using T = TypeParam;
  for (int C : {200, 1600, 2600}) {
  const int N = 300;
  auto x = randn(N * C, 1, 2.0f), w = randn(C, 2), b = randn(C, 3), d = randn(N * C, 4), dinp0 = randn(N * C, 5);
  auto dw0 = randn(C, 6), db0 = randn(C, 7);
  Buf<T> X(x), Wb(w), Bb(b), D(d), O(N * C), DI(dinp0), DW(dw0), DB(db0);
  Buf<float> mean(N), rstd(N), scratch(2 * C + 1);
  CUDA_CHECK(cudaMemset(scratch.d, 0, (2 * C + 1) * sizeof(float)));  // the kernels leave it zeroed
  unsigned* counter = reinterpret_cast<unsigned*>(scratch.d + 2 * C);
  cuda::layernorm_forward<T>(O.d, mean.d, rstd.d, X.d, Wb.d, Bb.d, N, C, 0);
  cuda::layernorm_backward<T>(DI.d, DW.d, DB.d, cuda::ColumnSums{scratch.d, counter, false}, D.d, X.d, Wb.d, mean.d,
                              rstd.d, N, C, true, 0);
  std::vector<float> o(N * C), mu(N), rs(N);
  cpu::layernorm_forward(o.data(), mu.data(), rs.data(), x.data(), w.data(), b.data(), N, C);
  auto dinp = dinp0, dw = dw0, db = db0;
  cpu::layernorm_backward(dinp.data(), dw.data(), db.data(), d.data(), x.data(), w.data(), mu.data(), rs.data(), N, C);
  EXPECT_LT(rel_err(O.get(), o), tol<T>(1e-6, 1e-2));
  EXPECT_LT(rel_err(rstd.get(), rs), 1e-5);
  EXPECT_LT(rel_err(DI.get(), dinp), tol<T>(1e-5, 1e-2));
  EXPECT_LT(rel_err(DW.get(), dw), tol<T>(1e-5, 1e-2));
  EXPECT_LT(rel_err(DB.get(), db), tol<T>(1e-5, 1e-2)) << "C " << C;
  const auto left = scratch.get();
  EXPECT_EQ(std::count(left.begin(), left.end(), 0.0f), 2 * C + 1) << "scratch and counter are left zeroed";
  // --deterministic: one row of partials per row block, added in order: the CPU's values, and the same bits
  // on a second call.
  const std::int64_t det_floats = column_sum_scratch_floats(N, 2 * C, true);
  Buf<float> det_scratch(det_floats + 1);
  CUDA_CHECK(cudaMemset(det_scratch.d, 0, (det_floats + 1) * sizeof(float)));
  const cuda::ColumnSums det{det_scratch.d, reinterpret_cast<unsigned*>(det_scratch.d + det_floats), true};
  Buf<T> DI1(dinp0), DW1(dw0), DB1(db0), DI2(dinp0), DW2(dw0), DB2(db0);
  cuda::layernorm_backward<T>(DI1.d, DW1.d, DB1.d, det, D.d, X.d, Wb.d, mean.d, rstd.d, N, C, true, 0);
  cuda::layernorm_backward<T>(DI2.d, DW2.d, DB2.d, det, D.d, X.d, Wb.d, mean.d, rstd.d, N, C, true, 0);
  EXPECT_LT(rel_err(DW1.get(), dw), tol<T>(1e-5, 1e-2));
  EXPECT_LT(rel_err(DB1.get(), db), tol<T>(1e-5, 1e-2));
  EXPECT_EQ(DW1.get(), DW2.get());
  EXPECT_EQ(DB1.get(), DB2.get());
  }
}

TYPED_TEST(KernelTest, MatmulForwardBackwardWithEpilogues) {
  REQUIRE_GPU();
  using T = TypeParam;
  const int M = 96, K = 64, N = 136;
  auto x = randn(M * K, 1), w = randn(N * K, 2, 0.2f), bias = randn(N, 3), res = randn(M * N, 4), dout = randn(M * N, 5);
  auto dw0 = randn(N * K, 6);
  auto pre_in = randn(M * K, 9);
  Buf<T> X(x), Wt(w), Bi(bias), R(res), D(dout), O(M * N), G(M * N), Pre(M * N), DX(M * K), DW(dw0), PreIn(pre_in),
      DXG(M * K);
  Buf<float> partial(N + 1);
  CUDA_CHECK(cudaMemset(partial.d, 0, (N + 1) * sizeof(float)));
  unsigned* counter = reinterpret_cast<unsigned*>(partial.d + N);
  Buf<T> DB(N), DW2(N * K), DB2(N);
  void* ws;
  CUDA_CHECK(cudaMalloc(&ws, kCublasWorkspaceBytes));
  {
    cuda::Matmul mm(ws, kCublasWorkspaceBytes);
    mm.forward<T>(O.d, X.d, Wt.d, Bi.d, R.d, M, K, N, 0);
    mm.forward_gelu<T>(G.d, Pre.d, X.d, Wt.d, Bi.d, M, K, N, 0);
    mm.backward_input<T>(DX.d, D.d, Wt.d, M, K, N, 0);
    mm.backward_input_dgelu<T>(DXG.d, D.d, Wt.d, PreIn.d, M, K, N, 0);
    mm.backward_weight<T>(DW.d, D.d, X.d, M, K, N, true, 0);
    cuda::bias_backward<T>(DB.d, D.d, cuda::ColumnSums{partial.d, counter, false}, M, N, false, 0);
    // again, overwriting: dW with beta = 0, and the bias reduction on the partials the first one left zeroed
    mm.backward_weight<T>(DW2.d, D.d, X.d, M, K, N, false, 0);
    cuda::bias_backward<T>(DB2.d, D.d, cuda::ColumnSums{partial.d, counter, false}, M, N, false, 0);
    CUDA_CHECK(cudaDeviceSynchronize());
  }
  CUDA_CHECK(cudaFree(ws));
  std::vector<float> o(M * N), g(M * N), dx(M * K), dw = dw0, db(N, 0.0f);
  cpu::matmul_forward(o.data(), x.data(), w.data(), bias.data(), M, K, N);
  std::vector<float> pre = o;
  cpu::gelu_forward(g.data(), pre.data(), M * N);
  for (int i = 0; i < M * N; ++i) o[i] += res[i];
  cpu::matmul_backward(dx.data(), dw.data(), db.data(), dout.data(), x.data(), w.data(), M, K, N);
  EXPECT_LT(rel_err(O.get(), o), tol<T>(1e-5, 1e-2));
  EXPECT_LT(rel_err(Pre.get(), pre), tol<T>(1e-5, 1e-2));
  EXPECT_LT(rel_err(G.get(), g), tol<T>(1e-5, 1e-2));
  EXPECT_LT(rel_err(DX.get(), dx), tol<T>(1e-5, 1e-2));
  std::vector<float> dxg(M * K);
  cpu::gelu_backward(dxg.data(), pre_in.data(), dx.data(), M * K);
  EXPECT_LT(rel_err(DXG.get(), dxg), tol<T>(1e-5, 1.5e-2));
  EXPECT_LT(rel_err(DW.get(), dw), tol<T>(1e-5, 1e-2));
  EXPECT_LT(rel_err(DB.get(), db), tol<T>(1e-5, 1e-2));
  std::vector<float> dw_fresh(N * K, 0.0f), db_fresh(N, 0.0f), dx_unused(M * K);
  cpu::matmul_backward(dx_unused.data(), dw_fresh.data(), db_fresh.data(), dout.data(), x.data(), w.data(), M, K, N);
  EXPECT_LT(rel_err(DW2.get(), dw_fresh), tol<T>(1e-5, 1e-2));
  EXPECT_LT(rel_err(DB2.get(), db_fresh), tol<T>(1e-5, 1e-2));
}

TYPED_TEST(KernelTest, GeluBackwardAndEncoder) {
  REQUIRE_GPU();
  using T = TypeParam;
  const int n = 4096;
  auto x = randn(n, 1, 2.0f), d = randn(n, 2);
  Buf<T> X(x), D(d), DI(n);
  cuda::gelu_backward<T>(DI.d, X.d, D.d, n, 0);
  std::vector<float> di(n);
  cpu::gelu_backward(di.data(), x.data(), d.data(), n);
  EXPECT_LT(rel_err(DI.get(), di), tol<T>(1e-5, 1e-2));

  const int B = 3, Tn = 17, C = 32, V = 50;
  std::vector<int> tok(B * Tn);
  std::mt19937 rng(3);
  for (auto& t : tok) t = static_cast<int>(rng() % 5);  // repeated tokens exercise the atomic adds
  auto wte = randn(V * C, 4), wpe = randn(Tn * C, 5), dout = randn(B * Tn * C, 6);
  auto dwte0 = randn(V * C, 7), dwpe0 = randn(Tn * C, 8);
  Buf<T> WTE(wte), WPE(wpe), O(B * Tn * C), DO(dout), DWTE(dwte0), DWPE(dwpe0);
  int* dtok;
  CUDA_CHECK(cudaMalloc(&dtok, tok.size() * sizeof(int)));
  CUDA_CHECK(cudaMemcpy(dtok, tok.data(), tok.size() * sizeof(int), cudaMemcpyHostToDevice));
  cuda::encoder_forward<T>(O.d, dtok, WTE.d, WPE.d, B, Tn, C, 0);
  cuda::encoder_backward<T>(DWTE.d, DWPE.d, DO.d, dtok, B, Tn, C, true, nullptr, 0);
  std::vector<float> o(B * Tn * C), dwte = dwte0, dwpe = dwpe0;
  cpu::encoder_forward(o.data(), tok.data(), wte.data(), wpe.data(), B, Tn, C);
  cpu::encoder_backward(dwte.data(), dwpe.data(), dout.data(), tok.data(), B, Tn, C);
  EXPECT_LT(rel_err(O.get(), o), tol<T>(1e-6, 1e-2));
  EXPECT_LT(rel_err(DWTE.get(), dwte), tol<T>(1e-6, 1e-2));
  EXPECT_LT(rel_err(DWPE.get(), dwpe), tol<T>(1e-6, 1e-2));
  // --deterministic: each token's positions summed in order (host-built positions), the CPU's values.
  cuda::TokenPositions where;
  where.build(tok.data(), static_cast<std::int64_t>(tok.size()));
  ASSERT_EQ(where.offsets.back(), B * Tn);
  std::vector<int> packed = where.tokens;
  packed.insert(packed.end(), where.offsets.begin(), where.offsets.end());
  packed.insert(packed.end(), where.positions.begin(), where.positions.end());
  int* dpos;
  CUDA_CHECK(cudaMalloc(&dpos, packed.size() * sizeof(int)));
  CUDA_CHECK(cudaMemcpy(dpos, packed.data(), packed.size() * sizeof(int), cudaMemcpyHostToDevice));
  const int distinct = static_cast<int>(where.tokens.size());
  const cuda::DeviceTokenPositions view{dpos, dpos + distinct, dpos + 2 * distinct + 1, distinct};
  Buf<T> DWTE2(dwte0), DWPE2(dwpe0);
  cuda::encoder_backward<T>(DWTE2.d, DWPE2.d, DO.d, dtok, B, Tn, C, true, &view, 0);
  EXPECT_LT(rel_err(DWTE2.get(), dwte), tol<T>(1e-6, 1e-2));
  EXPECT_LT(rel_err(DWPE2.get(), dwpe), tol<T>(1e-6, 1e-2));
  CUDA_CHECK(cudaFree(dpos));
  CUDA_CHECK(cudaFree(dtok));
}

// Attention on both paths: head sizes 64 and 128 (tensor cores for 16-bit) and 32 (plain path), T not a tile
// multiple (200) and one tile (64); multi-head (NKV == NH, GPT-2), grouped-query (NKV = NH/2) and multi-query
// (NKV = 1) key/value heads. The backward runs twice: dq, dk and dv repeat bit for bit (no atomics, the group's
// query heads summed in a fixed order).
TYPED_TEST(KernelTest, AttentionForwardBackward) {
  REQUIRE_GPU();
  using T = TypeParam;
  const std::pair<int, int> heads[] = {{3, 3}, {4, 2}, {4, 1}};  // (NH, NKV)
  for (int HS : {64, 128, 32})
    for (const auto& [NH, NKV] : heads)
      for (int Tn : {200, 64}) {
        const int B = 2, C = NH * HS, W = (NH + 2 * NKV) * HS;
        const std::string what = "HS " + std::to_string(HS) + ", NH " + std::to_string(NH) + ", NKV " +
                                 std::to_string(NKV) + ", T " + std::to_string(Tn);
        auto qkv = randn(static_cast<std::size_t>(B) * Tn * W, 1 + HS + NKV), dout = randn(B * Tn * C, 2 + HS + NKV);
        Buf<T> QKV(qkv), O(B * Tn * C), DO(dout), DQKV(B * Tn * W), DQKV2(B * Tn * W);
        Buf<float> lse(B * NH * Tn), drow(B * NH * Tn);
        cuda::attention_forward<T>(O.d, lse.d, QKV.d, B, Tn, NH, NKV, HS, 0);
        auto o_gpu = O.get();
        std::vector<float> o(B * Tn * C), l(B * NH * Tn), dqkv(static_cast<std::size_t>(B) * Tn * W);
        cpu::attention_forward(o.data(), l.data(), qkv.data(), B, Tn, NH, NKV, HS);
        EXPECT_LT(rel_err(o_gpu, o), tol<T>(1e-5, 1e-2)) << what;
        EXPECT_LT(rel_err(lse.get(), l), tol<T>(1e-5, 1e-3)) << what;
        // the backward consumes the GPU's (rounded) forward output, as in training
        cuda::attention_backward<T>(DQKV.d, drow.d, DO.d, QKV.d, O.d, lse.d, B, Tn, NH, NKV, HS, 0);
        cpu::attention_backward(dqkv.data(), dout.data(), qkv.data(), o_gpu.data(), l.data(), B, Tn, NH, NKV, HS);
        const auto got = DQKV.get();
        std::vector<float> gq, gk, gv, rq, rk, rv;
        for (int i = 0; i < B * Tn; ++i)
          for (int c = 0; c < W; ++c) {
            const std::size_t at = static_cast<std::size_t>(i) * W + c;
            if (c < C) gq.push_back(got[at]), rq.push_back(dqkv[at]);
            else if (c < C + NKV * HS) gk.push_back(got[at]), rk.push_back(dqkv[at]);
            else gv.push_back(got[at]), rv.push_back(dqkv[at]);
          }
        EXPECT_LT(rel_err(gq, rq), tol<T>(1e-4, 2e-2)) << "dQ, " << what;
        EXPECT_LT(rel_err(gk, rk), tol<T>(1e-4, 2e-2)) << "dK, " << what;
        EXPECT_LT(rel_err(gv, rv), tol<T>(1e-4, 2e-2)) << "dV, " << what;
        cuda::attention_backward<T>(DQKV2.d, drow.d, DO.d, QKV.d, O.d, lse.d, B, Tn, NH, NKV, HS, 0);
        EXPECT_EQ(differing_elements(DQKV2.get(), got), "equal") << "a second backward, " << what;
      }
  constexpr bool is_fp32 = std::is_same_v<T, float>;
  EXPECT_EQ(cuda::attention_uses_tensor_cores<T>(64), !is_fp32);
  EXPECT_EQ(cuda::attention_uses_tensor_cores<T>(128), !is_fp32);
  EXPECT_FALSE(cuda::attention_uses_tensor_cores<T>(32));
  std::vector<float> none(8);
  Buf<T> tiny(none);
  Buf<float> tiny_lse(8);
  EXPECT_THROW(cuda::attention_forward<T>(tiny.d, tiny_lse.d, tiny.d, 1, 1, 3, 2, 64, 0), CudaError)
      << "3 query heads over 2 key/value heads";
}

// RMSNorm against the CPU reference: rstd, the output, dinp accumulating onto a residual gradient, dw accumulating,
// and with --deterministic's ordered column sums, the same bits on a second call.
TYPED_TEST(KernelTest, RmsNormForwardBackward) {
  REQUIRE_GPU();
  using T = TypeParam;
  const float eps = 1e-5f;
  for (int C : {200, 1600, 4096}) {
    const int N = 300;
    auto x = randn(N * C, 1, 2.0f), w = randn(C, 2), d = randn(N * C, 4), dinp0 = randn(N * C, 5), dw0 = randn(C, 6);
    Buf<T> X(x), Wb(w), D(d), O(N * C), DI(dinp0), DW(dw0);
    Buf<float> rstd(N), scratch(C + 1);
    CUDA_CHECK(cudaMemset(scratch.d, 0, (C + 1) * sizeof(float)));  // the kernels leave it zeroed
    unsigned* counter = reinterpret_cast<unsigned*>(scratch.d + C);
    cuda::rmsnorm_forward<T>(O.d, rstd.d, X.d, Wb.d, N, C, eps, 0);
    cuda::rmsnorm_backward<T>(DI.d, DW.d, cuda::ColumnSums{scratch.d, counter, false}, D.d, X.d, Wb.d, rstd.d, N, C,
                              true, 0);
    std::vector<float> o(N * C), rs(N);
    cpu::rmsnorm_forward(o.data(), rs.data(), x.data(), w.data(), N, C, eps);
    auto dinp = dinp0, dw = dw0;
    cpu::rmsnorm_backward(dinp.data(), dw.data(), d.data(), x.data(), w.data(), rs.data(), N, C);
    EXPECT_LT(rel_err(O.get(), o), tol<T>(2e-6, 1e-2)) << "C " << C;
    EXPECT_LT(rel_err(rstd.get(), rs), 1e-5) << "C " << C;
    EXPECT_LT(rel_err(DI.get(), dinp), tol<T>(1e-5, 1e-2)) << "C " << C;
    EXPECT_LT(rel_err(DW.get(), dw), tol<T>(1e-5, 1e-2)) << "C " << C;
    const auto left = scratch.get();
    EXPECT_EQ(std::count(left.begin(), left.end(), 0.0f), C + 1) << "scratch and counter are left zeroed";
    // dw overwritten (accumulate false), deterministic: the CPU's values from zero, the same bits twice.
    const std::int64_t det_floats = column_sum_scratch_floats(N, C, true);
    Buf<float> det_scratch(det_floats + 1);
    CUDA_CHECK(cudaMemset(det_scratch.d, 0, (det_floats + 1) * sizeof(float)));
    const cuda::ColumnSums det{det_scratch.d, reinterpret_cast<unsigned*>(det_scratch.d + det_floats), true};
    Buf<T> DI1(dinp0), DW1(dw0), DI2(dinp0), DW2(dw0);
    cuda::rmsnorm_backward<T>(DI1.d, DW1.d, det, D.d, X.d, Wb.d, rstd.d, N, C, false, 0);
    cuda::rmsnorm_backward<T>(DI2.d, DW2.d, det, D.d, X.d, Wb.d, rstd.d, N, C, false, 0);
    std::vector<float> dw_fresh(C, 0.0f), dinp_unused = dinp0;
    cpu::rmsnorm_backward(dinp_unused.data(), dw_fresh.data(), d.data(), x.data(), w.data(), rs.data(), N, C);
    EXPECT_LT(rel_err(DW1.get(), dw_fresh), tol<T>(1e-5, 1e-2)) << "C " << C;
    EXPECT_EQ(DW1.get(), DW2.get());
    EXPECT_EQ(DI1.get(), DI2.get());
  }
}

// RoPE in place against the CPU reference: head sizes 64 and 128 (16-byte vector path) and 12 (element path),
// grouped key heads; the value heads come back untouched, bit for bit.
TYPED_TEST(KernelTest, RopeForwardBackward) {
  REQUIRE_GPU();
  using T = TypeParam;
  const int B = 2, Tn = 50, NH = 4, NKV = 2;
  for (int HS : {64, 128, 12}) {
    const int W = (NH + 2 * NKV) * HS, half = HS / 2;
    std::vector<float> c(Tn * half), sn(Tn * half);
    cpu::rope_tables(c.data(), sn.data(), Tn, HS, 10000.0, nullptr);
    Buf<float> Cos(c), Sin(sn);
    for (bool backward : {false, true}) {
      auto x = randn(static_cast<std::size_t>(B) * Tn * W, 3 + HS + backward);
      Buf<T> X(x);  // rounds x to T
      std::vector<float> ref = x;
      if (backward) {
        cuda::rope_backward<T>(X.d, Cos.d, Sin.d, B, Tn, NH, NKV, HS, 0);
        cpu::rope_backward(ref.data(), c.data(), sn.data(), B, Tn, NH, NKV, HS);
      } else {
        cuda::rope_forward<T>(X.d, Cos.d, Sin.d, B, Tn, NH, NKV, HS, 0);
        cpu::rope_forward(ref.data(), c.data(), sn.data(), B, Tn, NH, NKV, HS);
      }
      const auto got = X.get();
      const std::string what = std::string(backward ? "backward" : "forward") + ", HS " + std::to_string(HS);
      EXPECT_LT(rel_err(got, ref), tol<T>(1e-6, 1e-2)) << what;
      std::size_t moved = 0;
      for (int r = 0; r < B * Tn; ++r)
        for (int col = (NH + NKV) * HS; col < W; ++col)
          moved += got[static_cast<std::size_t>(r) * W + col] != x[static_cast<std::size_t>(r) * W + col];
      EXPECT_EQ(moved, 0u) << "value heads, " << what;
    }
  }
}

// SwiGLU against the CPU reference: F a multiple of every pack (96), of the fp32 pack only (100) and of none (13);
// the backward in place (dgate_up == gate_up) equals the out-of-place one bit for bit.
TYPED_TEST(KernelTest, SwiGluForwardBackwardInPlace) {
  REQUIRE_GPU();
  using T = TypeParam;
  const int N = 37;
  for (int F : {96, 100, 13}) {
    auto gu = randn(static_cast<std::size_t>(N) * 2 * F, 7 + F, 2.0f), d = randn(N * F, 8 + F);
    Buf<T> GU(gu), D(d), O(N * F), DGU(N * 2 * F), GU2(gu);
    cuda::swiglu_forward<T>(O.d, GU.d, N, F, 0);
    cuda::swiglu_backward<T>(DGU.d, GU.d, D.d, N, F, 0);
    cuda::swiglu_backward<T>(GU2.d, GU2.d, D.d, N, F, 0);  // in place
    std::vector<float> o(N * F), dgu(N * 2 * F);
    cpu::swiglu_forward(o.data(), gu.data(), N, F);
    cpu::swiglu_backward(dgu.data(), gu.data(), d.data(), N, F);
    EXPECT_LT(rel_err(O.get(), o), tol<T>(1e-5, 1e-2)) << "F " << F;
    const auto got = DGU.get();
    EXPECT_LT(rel_err(got, dgu), tol<T>(1e-5, 1e-2)) << "F " << F;
    EXPECT_EQ(differing_elements(GU2.get(), got), "equal") << "in place, F " << F;
  }
}

TYPED_TEST(KernelTest, CrossEntropyInPlace) {
  REQUIRE_GPU();
  using T = TypeParam;
  const int N = 37, V = 1000, Vp = 1024;
  auto logits = randn(N * Vp, 1, 3.0f);
  std::vector<int> tg(N);
  for (int i = 0; i < N; ++i) tg[i] = (i * 131) % V;
  Buf<T> L(logits);
  Buf<float> losses(N);
  int* dtg;
  CUDA_CHECK(cudaMalloc(&dtg, N * sizeof(int)));
  CUDA_CHECK(cudaMemcpy(dtg, tg.data(), N * sizeof(int), cudaMemcpyHostToDevice));
  cuda::crossentropy_forward_backward<T>(losses.d, L.d, dtg, N, V, Vp, 0.25f, true, 0);
  std::vector<float> loss(N), d(N * Vp);
  cpu::crossentropy_forward_backward(loss.data(), d.data(), logits.data(), tg.data(), N, V, Vp, 0.25f);
  EXPECT_LT(rel_err(losses.get(), loss), 1e-5);
  EXPECT_LT(rel_err(L.get(), d), tol<T>(1e-5, 1e-2));
  CUDA_CHECK(cudaFree(dtg));
}

TYPED_TEST(KernelTest, AdamWAndGradNorm) {
  REQUIRE_GPU();
  using T = TypeParam;
  const ParamLayout layout(make_shape(130, 16, 2, 2, 8));
  const std::int64_t n = layout.total();
  auto p = randn(n, 1), g = randn(n, 2, 0.1f), m = randn(n, 3, 0.01f), v = randn(n, 4, 0.01f);
  for (auto& x : v) x = x * x;
  Buf<T> Pd(n), Gd(g);
  Buf<float> master(n), Md(m), Vd(v), norm(kNormPartials + 1);
  Buf<float> src(p);  // fp32
  cuda::set_from_fp32<T>(Pd.d, std::is_same_v<T, float> ? nullptr : master.d, src.d, n, 0);
  if constexpr (std::is_same_v<T, float>) Pd.upload(p);
  cuda::grad_norm_squared<T>(norm.d, norm.d + 1, Gd.d, n, 0);
  const float scale = 0.7f;
  cuda::adamw_update<T>(Pd.d, std::is_same_v<T, float> ? nullptr : master.d, Gd.d, Md.d, Vd.d, n, 1e-2f, 0.9f, 0.95f,
                        1e-8f, 0.1f, scale, 3,
                        cuda::DecayGeometry{layout.blocks_begin(), layout.block_stride(),
                                            layout.block_decay_elements(), layout.blocks_end(), layout.tail_decay_end()},
                        0);
  double sq = 0;
  for (float x : g) sq += static_cast<double>(x) * x;
  EXPECT_NEAR(norm.get()[0], sq, 1e-5 * sq);
  std::unique_ptr<bool[]> decay(new bool[n]);
  for (std::int64_t i = 0; i < n; ++i) decay[i] = layout.decayed(i);
  cpu::adamw(p.data(), g.data(), m.data(), v.data(), decay.get(), n, 1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, scale, 3);
  if constexpr (std::is_same_v<T, float>) EXPECT_LT(rel_err(Pd.get(), p), 1e-6);
  else EXPECT_LT(rel_err(master.get(), p), 1e-6);
  EXPECT_LT(rel_err(Md.get(), m), 1e-6);
  EXPECT_LT(rel_err(Vd.get(), v), 1e-6);

  // The same step as two partitions [0, split) and [split, n) (what a ZeRO rank updates) equals the whole: with
  // split a multiple of 8 both halves take the 16-byte path, otherwise (split odd, or a multiple of 4 but not 8)
  // the element-by-element path of the same arithmetic, with the tail of the first half.
  for (const std::int64_t split : {(n / 2) / 8 * 8, (n / 2) / 8 * 8 + 4, (n / 2) / 8 * 8 + 1}) {
    auto p2 = randn(n, 11), m2 = randn(n, 12, 0.01f), v2 = randn(n, 13, 0.01f);
    for (auto& x : v2) x = x * x;
    Buf<float> Pw(p2), Mw(m2), Vw(v2), Pp(p2), Mp(m2), Vp(v2);
    Buf<T> Tw(n), Tp(n);
    const cuda::DecayGeometry geo{layout.blocks_begin(), layout.block_stride(), layout.block_decay_elements(),
                                  layout.blocks_end(), layout.tail_decay_end()};
    cuda::adamw_update<T>(Tw.d, Pw.d, Gd.d, Mw.d, Vw.d, n, 1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, 1.0f, 2, geo, 0);
    for (auto [begin, end] : {std::pair<std::int64_t, std::int64_t>{0, split}, {split, n}}) {
      cuda::DecayGeometry part = geo;
      part.base = begin;
      cuda::adamw_update<T>(Tp.d + begin, Pp.d + begin, Gd.d + begin, Mp.d + begin, Vp.d + begin, end - begin, 1e-2f,
                            0.9f, 0.95f, 1e-8f, 0.1f, 1.0f, 2, part, 0);
    }
    EXPECT_EQ(Pp.get(), Pw.get()) << "split " << split;
    EXPECT_EQ(Mp.get(), Mw.get()) << "split " << split;
    EXPECT_EQ(Vp.get(), Vw.get()) << "split " << split;
    EXPECT_EQ(Tp.get(), Tw.get()) << "split " << split;
  }
}

// ---------------------------------------------------------------------------------------------------------
// Whole step against the CPU trainer.
// ---------------------------------------------------------------------------------------------------------
ExecConfig small_model(ExecPrecision precision) {
  ExecConfig c;
  c.shape = make_shape(257, 128, 2, 2, 256);  // head size 64: the tensor-core attention in 16-bit
  c.micro_batch = 2;
  c.seq_len = 192;
  c.precision = precision;
  c.optimizer.learning_rate = 1e-3;
  c.optimizer.weight_decay = 0.1;
  c.seed = 5;
  return c;
}

struct StepComparison {
  double loss_gpu, loss_cpu, logits_err, worst_grad_err;
  std::string worst_grad;
};

StepComparison compare_step(ExecConfig c) {
  auto gpu = make_cuda_trainer(c);
  ExecConfig cc = c;
  cc.precision = ExecPrecision::fp32;
  auto cpu = make_cpu_trainer(cc);
  auto params = gpu->params();
  cpu->set_params(params);  // the same (rounded) starting point
  auto src = TokenSource::synthetic(c.shape.vocab, 9);
  const auto b = src.next_batch(c.micro_batch, c.seq_len);
  StepComparison r;
  r.loss_gpu = gpu->forward_loss(b.inputs, b.targets);
  r.loss_cpu = cpu->forward_loss(b.inputs, b.targets);
  r.logits_err = rel_err(gpu->logits(), cpu->logits());
  gpu->forward_backward(b.inputs, b.targets);
  cpu->forward_backward(b.inputs, b.targets);
  const auto gg = gpu->grads(), gc = cpu->grads();
  r.worst_grad_err = 0;
  for (const auto& t : gpu->layout().tensors()) {
    const std::vector<float> a(gg.begin() + t.offset, gg.begin() + t.offset + t.numel());
    const std::vector<float> e(gc.begin() + t.offset, gc.begin() + t.offset + t.numel());
    const double err = rel_err(a, e);
    if (err > r.worst_grad_err) {
      r.worst_grad_err = err;
      r.worst_grad = t.name;
    }
  }
  return r;
}

TEST(CudaTrainer, Fp32StepMatchesCpuReference) {
  REQUIRE_GPU();
  const auto r = compare_step(small_model(ExecPrecision::fp32));
  EXPECT_NEAR(r.loss_gpu, r.loss_cpu, 1e-5);
  EXPECT_LT(r.logits_err, 1e-5);
  EXPECT_LT(r.worst_grad_err, 1e-4) << r.worst_grad;
}

TEST(CudaTrainer, Bf16StepMatchesCpuReference) {
  REQUIRE_GPU();
  const auto r = compare_step(small_model(ExecPrecision::bf16));
  EXPECT_NEAR(r.loss_gpu, r.loss_cpu, 2e-2);
  EXPECT_LT(r.logits_err, 2e-2);
  EXPECT_LT(r.worst_grad_err, 6e-2) << r.worst_grad;
}

// Head size 128 (the tensor-core attention's second instantiation) in a whole training step.
TEST(CudaTrainer, Bf16StepWithHeadSize128MatchesCpuReference) {
  REQUIRE_GPU();
  ExecConfig c = small_model(ExecPrecision::bf16);
  c.shape = make_shape(257, 256, 2, 2, 256);
  const auto r = compare_step(c);
  EXPECT_NEAR(r.loss_gpu, r.loss_cpu, 2e-2);
  EXPECT_LT(r.logits_err, 2e-2);
  EXPECT_LT(r.worst_grad_err, 6e-2) << r.worst_grad;
}

TEST(CudaTrainer, Fp16StepMatchesCpuReference) {
  REQUIRE_GPU();
  const auto r = compare_step(small_model(ExecPrecision::fp16));
  EXPECT_NEAR(r.loss_gpu, r.loss_cpu, 1e-2);
  EXPECT_LT(r.logits_err, 1e-2);
  EXPECT_LT(r.worst_grad_err, 3e-2) << r.worst_grad;
}

// The Llama configuration of the same pipeline: RMSNorm, RoPE, SwiGLU, grouped-query attention, untied head.
// Head size 64 (GQA 4/2, q/k/v biases as Qwen2's) and head size 128 with Llama 3's rope scaling.
ExecConfig small_llama(ExecPrecision precision, std::int64_t head_size) {
  ExecConfig c = small_model(precision);
  const std::int64_t heads = 4, hidden = heads * head_size;
  c.shape = make_llama_shape(256, hidden, 2, heads, 2, 3 * hidden / 2 / 8 * 8, 256, 10000.0, 1e-5);
  if (head_size == 64) c.shape.qkv_bias = true;
  else c.shape.rope_scaling = RopeScaling{true, 8.0, 1.0, 4.0, 64};  // wavelengths past 64 positions are scaled
  return c;
}

// Tolerances as for GPT-2's steps above: fp32 1e-5 (loss, logits) and 1e-4 (gradients); bf16 2e-2 and 6e-2.
void expect_llama_step_matches_cpu(ExecPrecision precision, double loss_tol, double logits_tol, double grad_tol) {
  for (std::int64_t hs : {64, 128}) {
    const auto r = compare_step(small_llama(precision, hs));
    EXPECT_NEAR(r.loss_gpu, r.loss_cpu, loss_tol) << "head size " << hs;
    EXPECT_LT(r.logits_err, logits_tol) << "head size " << hs;
    EXPECT_LT(r.worst_grad_err, grad_tol) << r.worst_grad << ", head size " << hs;
  }
}

TEST(CudaTrainer, LlamaFp32StepMatchesCpuReference) {
  REQUIRE_GPU();
  expect_llama_step_matches_cpu(ExecPrecision::fp32, 1e-5, 1e-5, 1e-4);
}

TEST(CudaTrainer, LlamaBf16StepMatchesCpuReference) {
  REQUIRE_GPU();
  expect_llama_step_matches_cpu(ExecPrecision::bf16, 2e-2, 2e-2, 6e-2);
}

// Three AdamW steps with gradient accumulation against the CPU trainer, which keeps every tensor. Covers the
// recompute paths: full (each block's forward again) and selective (the norm and MLP activation outputs rebuilt in
// the backward working set); for Llama also no recompute (SwiGLU's backward in place over gate and up, the untied
// token embedding's gradient started at 0 on the first micro-step).
void expect_adamw_steps_match_cpu(const ExecConfig& base, ExecRecompute rec) {
  ExecConfig c = base;
  c.recompute = rec;
  c.grad_accum = 2;
  auto gpu = make_cuda_trainer(c);
  auto cpu = make_cpu_trainer(c);
  auto src = TokenSource::synthetic(c.shape.vocab, 4);
  for (int s = 0; s < 3; ++s) {
    const auto b = src.next_batch(c.micro_batch * c.grad_accum, c.seq_len);
    const auto rg = gpu->step(b.inputs, b.targets);
    const auto rc = cpu->step(b.inputs, b.targets);
    EXPECT_NEAR(rg.loss, rc.loss, 1e-4) << "step " << s << ", recompute " << static_cast<int>(rec);
    EXPECT_NEAR(rg.grad_norm, rc.grad_norm, 1e-3 * rc.grad_norm) << "step " << s;
  }
  EXPECT_LT(rel_err(gpu->params(), cpu->params()), 1e-4) << "recompute " << static_cast<int>(rec);
}

TEST(CudaTrainer, LlamaParamsAfterAdamWStepsMatchCpu) {
  REQUIRE_GPU();
  for (auto rec : {ExecRecompute::none, ExecRecompute::full, ExecRecompute::selective})
    expect_adamw_steps_match_cpu(small_llama(ExecPrecision::fp32, 64), rec);
}

TEST(CudaTrainer, ParamsAfterAdamWStepsMatchCpu) {
  REQUIRE_GPU();
  for (auto rec : {ExecRecompute::full, ExecRecompute::selective})
    expect_adamw_steps_match_cpu(small_model(ExecPrecision::fp32), rec);
}

// bf16 with selective recompute against the same run keeping every tensor: the rebuilt GELU output is rounded from
// the stored bf16 pre-GELU value (the GEMM epilogue rounds it from fp32), a bf16 rounding difference in the FC
// projection's weight gradient, so the tolerance is bf16's (2^-8 relative) on the losses over a few steps.
TEST(CudaTrainer, SelectiveRecomputeTrainsAsKeepingEveryTensor) {
  REQUIRE_GPU();
  ExecConfig c = small_model(ExecPrecision::bf16);
  auto keep = make_cuda_trainer(c);
  c.recompute = ExecRecompute::selective;
  auto rebuild = make_cuda_trainer(c);
  auto src = TokenSource::synthetic(c.shape.vocab, 4);
  for (int s = 0; s < 4; ++s) {
    const auto b = src.next_batch(c.micro_batch * c.grad_accum, c.seq_len);
    const auto rk = keep->step(b.inputs, b.targets);
    const auto rr = rebuild->step(b.inputs, b.targets);
    EXPECT_NEAR(rr.loss, rk.loss, 4e-3 * rk.loss) << "step " << s;
  }
  EXPECT_LT(rel_err(rebuild->params(), keep->params()), 1e-2);
}

// Every ZeRO stage on one GPU (the engine's stage-3 gathers, prefetch and arena included) gives the fp32 CPU
// reference's losses and parameters over the same steps.
TEST(CudaTrainer, EveryStageOnOneGpuMatchesCpu) {
  REQUIRE_GPU();
  for (int stage = 0; stage <= 3; ++stage) {
    ExecConfig c = small_model(ExecPrecision::fp32);
    c.grad_accum = 2;
    c.zero.stage = stage;
    c.zero.reduce_bucket_elements = 40000;  // several buckets
    c.zero.param_persistence_threshold = 1000;  // LayerNorm and biases persistent, weights gathered
    c.zero.prefetch_bucket_elements = 50000;
    c.zero.max_reuse_distance = 0;
    auto gpu = make_cuda_trainer(c);
    ExecConfig cc = c;
    cc.zero.stage = 0;
    auto cpu = make_cpu_trainer(cc);
    auto src = TokenSource::synthetic(c.shape.vocab, 4);
    for (int s = 0; s < 3; ++s) {
      const auto b = src.next_batch(c.micro_batch * c.grad_accum, c.seq_len);
      const auto rg = gpu->step(b.inputs, b.targets);
      const auto rc = cpu->step(b.inputs, b.targets);
      EXPECT_NEAR(rg.loss, rc.loss, 1e-4) << "stage " << stage << ", step " << s;
    }
    EXPECT_LT(rel_err(gpu->params(), cpu->params()), 1e-4) << "stage " << stage;
  }
}

// A trainer's states read and restored into a fresh trainer (the checkpoint path) continue the same run, bit
// for bit on the GPU too: the 16-bit parameters are rebuilt as the rounding of the fp32 master.
TEST(CudaTrainer, RestoredStateContinuesBitForBit) {
  REQUIRE_GPU();
  for (int stage : {0, 3}) {
    ExecConfig c = small_model(ExecPrecision::bf16);
    c.zero.stage = stage;
    c.zero.param_persistence_threshold = 1000;
    // Bit for bit needs the ordered reductions: without them two uninterrupted runs differ in the last bits too.
    c.zero.deterministic = true;
    auto a = make_cuda_trainer(c);
    auto src = TokenSource::synthetic(c.shape.vocab, 6);
    std::vector<TokenBatch> batches;
    for (int s = 0; s < 4; ++s) batches.push_back(src.next_batch(c.micro_batch, c.seq_len));
    for (int s = 0; s < 2; ++s) a->step(batches[s].inputs, batches[s].targets);
    std::vector<float> master, m, v;
    a->read_owned_state(master, m, v);
    const auto ranges = a->owned_ranges();
    auto b = make_cuda_trainer(c);
    b->restore_state(
        [&](std::int64_t begin, std::int64_t n, float* pm, float* pmm, float* pv) {
          // one rank owns everything: owned ranges tile the flat buffer in bucket order
          std::int64_t at = 0;
          for (const auto& [lo, len] : ranges) {
            const std::int64_t x = std::max(begin, lo), y = std::min(begin + n, lo + len);
            for (std::int64_t i = x; i < y; ++i) {
              if (pm) pm[i - begin] = master[at + (i - lo)];
              if (pmm) pmm[i - begin] = m[at + (i - lo)];
              if (pv) pv[i - begin] = v[at + (i - lo)];
            }
            at += len;
          }
        },
        a->optimizer_step(), a->loss_scaler_state());
    for (int s = 2; s < 4; ++s) {
      const auto ra = a->step(batches[s].inputs, batches[s].targets);
      const auto rb = b->step(batches[s].inputs, batches[s].targets);
      EXPECT_EQ(ra.loss, rb.loss) << "stage " << stage << ", step " << s;
    }
    EXPECT_EQ(a->params(), b->params()) << "stage " << stage;
  }
}

// --deterministic: two runs of the same steps give the same bits (bf16, accumulation, several buckets).
TEST(CudaTrainer, DeterministicRunsRepeatBitForBit) {
  REQUIRE_GPU();
  for (int stage : {0, 2}) {
    ExecConfig c = small_model(ExecPrecision::bf16);
    c.grad_accum = 2;
    c.zero.stage = stage;
    c.zero.deterministic = true;
    std::vector<float> params[2];
    std::vector<double> losses[2];
    for (int run = 0; run < 2; ++run) {
      auto gpu = make_cuda_trainer(c);
      auto src = TokenSource::synthetic(c.shape.vocab, 8);
      for (int s = 0; s < 3; ++s) {
        const auto b = src.next_batch(c.micro_batch * c.grad_accum, c.seq_len);
        losses[run].push_back(gpu->step(b.inputs, b.targets).loss);
      }
      params[run] = gpu->params();
    }
    EXPECT_EQ(losses[0], losses[1]) << "stage " << stage;
    EXPECT_EQ(params[0], params[1]) << "stage " << stage;
  }
}

// data_types.grad_accum_dtype fp32 (bf16 model, 4 micro-steps): the step's gradients are the exact sum of the
// four micro-steps' bf16 gradients, up to fp32 rounding (1e-6 relative). The reference sums, in double on the
// host, the gradients of the same micro-batches taken one at a time by a one-micro-step trainer (its loss gradient
// is 4x the step's, a power of two: the bf16 micro-step gradients are the same up to that factor). Accumulating in
// bf16 instead rounds every partial sum to 8 bits (error ~1e-3), which the second half checks the test can see.
// At stages 0-1 the micro-step gradients are added into fp32 gradients; from stage 2 each reduced chunk into the
// fp32 partition, with 16-bit and with fp32 reductions.
TEST(CudaTrainer, Fp32GradientAccumulationIsTheExactSumOfTheMicroSteps) {
  REQUIRE_GPU();
  constexpr int kMicroSteps = 4;
  for (int stage = 0; stage <= 3; ++stage) {
    for (const bool fp32_communication : {false, true}) {
      if (fp32_communication && stage < 2) continue;  // one rank reduces nothing at stages 0-1
      ExecConfig one = small_model(ExecPrecision::bf16);
      one.zero.stage = stage;
      one.zero.deterministic = true;  // fixed-order column sums: the micro-step gradients repeat bit for bit
      one.zero.reduce_bucket_elements = 40000;
      one.zero.param_persistence_threshold = 1000;
      one.zero.fp32_grad_accumulation = true;
      one.zero.fp32_communication = fp32_communication;
      auto single = make_cuda_trainer(one);
      auto src = TokenSource::synthetic(one.shape.vocab, 12);
      const auto batch = src.next_batch(one.micro_batch * kMicroSteps, one.seq_len);
      const std::size_t bt = static_cast<std::size_t>(one.micro_batch * one.seq_len);
      std::vector<double> sum(single->params().size(), 0.0);
      for (int k = 0; k < kMicroSteps; ++k) {
        const std::vector<std::int32_t> in(batch.inputs.begin() + k * bt, batch.inputs.begin() + (k + 1) * bt);
        const std::vector<std::int32_t> tg(batch.targets.begin() + k * bt, batch.targets.begin() + (k + 1) * bt);
        single->forward_backward(in, tg);
        const auto g = single->grads();
        for (std::size_t i = 0; i < g.size(); ++i) sum[i] += g[i];
      }
      std::vector<float> reference(sum.size());
      for (std::size_t i = 0; i < sum.size(); ++i) reference[i] = static_cast<float>(sum[i] / kMicroSteps);
      double err[2];
      for (const bool fp32_accumulation : {true, false}) {
        ExecConfig c = one;
        c.grad_accum = kMicroSteps;
        c.zero.fp32_grad_accumulation = fp32_accumulation;
        auto trainer = make_cuda_trainer(c);
        trainer->step(batch.inputs, batch.targets);
        err[fp32_accumulation ? 0 : 1] = rel_err(trainer->grads(), reference);
      }
      const std::string where = "stage " + std::to_string(stage) + (fp32_communication ? ", fp32 reductions" : "");
      EXPECT_LT(err[0], 1e-6) << where;
      EXPECT_GT(err[1], 1e-4) << where << " (bf16 accumulation)";
    }
  }
}

TEST(CudaTrainer, Fp16OverflowSkipsTheStepAndHalvesTheScale) {
  REQUIRE_GPU();
  ExecConfig c = small_model(ExecPrecision::fp16);
  c.loss_scale.initial_scale_power = 40;  // 2^40 x gradients overflows fp16 (max 65504)
  c.loss_scale.hysteresis = 1;
  auto gpu = make_cuda_trainer(c);
  const auto before = gpu->params();
  auto src = TokenSource::synthetic(c.shape.vocab, 2);
  const auto b = src.next_batch(c.micro_batch, c.seq_len);
  const auto r = gpu->step(b.inputs, b.targets);
  EXPECT_TRUE(r.skipped);
  EXPECT_EQ(r.loss_scale, std::pow(2.0, 40));
  EXPECT_EQ(gpu->params(), before);
  int steps = 1;
  StepResult last = r;
  while (last.skipped && steps < 40) {
    last = gpu->step(b.inputs, b.targets);
    ++steps;
  }
  EXPECT_FALSE(last.skipped);
  EXPECT_LT(last.loss_scale, std::pow(2.0, 20));
  EXPECT_TRUE(std::isfinite(last.grad_norm));
}

// ZeRO-Offload on one GPU (stages 1-3, every precision): the CPU AdamW on the host against the GPU's AdamW
// kernel on the device, over the same steps. The two compute the same update with different operation order
// (the GPU kernel contracts multiply-adds), so the fp32 master differs in its last bits and a 16-bit parameter
// can round the other way: tolerances are relative L2 over all parameters and the master, 1e-5 in fp32 (a few
// ulps after 4 steps) and 2e-3 in bf16/fp16 (an occasional flipped 16-bit rounding, 2^-8 relative, on ~1e-4 of
// the elements reaching the loss); losses within 1e-4 (fp32) and 2e-3 relative (16-bit). sub_group_size 30000
// splits buckets into several pieces.
TEST(CudaTrainer, OptimizerOffloadMatchesTheDeviceOptimizer) {
  REQUIRE_GPU();
  for (ExecPrecision precision : {ExecPrecision::fp32, ExecPrecision::bf16, ExecPrecision::fp16})
    for (int stage = 1; stage <= 3; ++stage) {
      const std::string what = to_string(precision) + ", stage " + std::to_string(stage);
      ExecConfig c = small_model(precision);
      c.grad_accum = 2;
      c.zero.stage = stage;
      c.zero.reduce_bucket_elements = 40000;
      c.zero.param_persistence_threshold = 1000;
      c.optimizer.grad_clip = 0.5;
      ExecConfig o = c;
      o.zero.offload_optimizer = true;
      o.zero.sub_group_elements = 30000;
      o.zero.cpu_optimizer_threads = 4;
      auto dev = make_cuda_trainer(c);
      auto off = make_cuda_trainer(o);
      const double tol = precision == ExecPrecision::fp32 ? 1e-5 : 2e-3;
      auto src = TokenSource::synthetic(c.shape.vocab, 12);
      for (int s = 0; s < 4; ++s) {
        const auto b = src.next_batch(c.micro_batch * c.grad_accum, c.seq_len);
        const auto rd = dev->step(b.inputs, b.targets);
        const auto ro = off->step(b.inputs, b.targets);
        EXPECT_EQ(rd.skipped, ro.skipped) << what << ", step " << s;
        EXPECT_NEAR(ro.loss, rd.loss, (precision == ExecPrecision::fp32 ? 1e-4 : 2e-3) * std::fabs(rd.loss))
            << what << ", step " << s;
        EXPECT_GT(ro.times.offload.pieces, 1) << what;
        EXPECT_GT(ro.times.offload.to_host_s, 0) << what;
        // Stages 1-2 update during the next step's forward (the deferred update): step 0 copies nothing back.
        if (s > 0 || stage == 3) EXPECT_GT(ro.times.offload.to_device_s, 0) << what << ", step " << s;
      }
      EXPECT_LT(rel_err(off->params(), dev->params()), tol) << what;
      std::vector<float> md, mo, m1, m2, v1, v2;
      dev->read_owned_state(md, m1, v1);
      off->read_owned_state(mo, m2, v2);
      EXPECT_LT(rel_err(mo, md), tol) << what << ": master";
      EXPECT_LT(rel_err(m2, m1), 10 * tol) << what << ": AdamW momentum";
      // Nothing of the optimizer on the GPU; on the host the master, the moments, the gradients and (16-bit)
      // the copy back.
      const MemoryReport mem = off->memory();
      EXPECT_EQ(mem.component("master_params"), 0) << what;
      EXPECT_EQ(mem.component("optimizer_states"), 0) << what;
      const std::int64_t part = static_cast<std::int64_t>(mo.size());
      const std::int64_t e = element_bytes(precision);
      EXPECT_EQ(mem.host_total(), part * (12 + e + (precision == ExecPrecision::fp32 ? 0 : e))) << what;
    }
}

// ZeRO-Infinity parameter offload (offload_param cpu, stage 3) on one GPU, every precision: the parameter
// partition in host memory, each chunk copied host-to-device into a staging buffer before its all-gather. With
// the device AdamW (results copied back to the host) against the same run without parameter offload, and with
// the optimizer offloaded too (the CPU AdamW writing the host partition) against optimizer offload alone. The
// staged chunks are the bytes the device partition would hold and the same AdamW computes the update, so with
// --deterministic (the ordered reductions) the runs are equal: tolerance 0 on losses, parameters and states.
// buffer_count 2 makes the staging buffers rotate inside a unit; one case uses pageable memory (pin_memory
// false).
TEST(CudaTrainer, ParameterOffloadEqualsTheDevicePartition) {
  REQUIRE_GPU();
  for (ExecPrecision precision : {ExecPrecision::fp32, ExecPrecision::bf16, ExecPrecision::fp16})
    for (bool optimizer : {false, true}) {
      const std::string what = to_string(precision) + (optimizer ? ", optimizer offloaded too" : ", device AdamW");
      ExecConfig c = small_model(precision);
      c.grad_accum = 2;
      c.zero.stage = 3;
      c.zero.reduce_bucket_elements = 40000;
      c.zero.param_persistence_threshold = 1000;
      c.zero.deterministic = true;
      c.zero.offload_optimizer = optimizer;
      c.zero.cpu_optimizer_threads = 4;
      c.optimizer.grad_clip = 0.5;
      ExecConfig o = c;
      o.zero.offload_param = true;
      o.zero.param_buffer_count = 2;
      o.zero.offload_pin_memory = !(optimizer && precision == ExecPrecision::bf16);
      auto dev = make_cuda_trainer(c);
      auto off = make_cuda_trainer(o);
      EXPECT_EQ(differing_elements(off->params(), dev->params()), "equal") << what << ": initialization";
      auto src = TokenSource::synthetic(c.shape.vocab, 12);
      for (int s = 0; s < 4; ++s) {
        const auto b = src.next_batch(c.micro_batch * c.grad_accum, c.seq_len);
        const auto rd = dev->step(b.inputs, b.targets);
        const auto ro = off->step(b.inputs, b.targets);
        EXPECT_EQ(ro.skipped, rd.skipped) << what << ", step " << s;
        EXPECT_EQ(ro.loss, rd.loss) << what << ", step " << s;
        EXPECT_EQ(ro.grad_norm, rd.grad_norm) << what << ", step " << s;
        EXPECT_GT(ro.times.offload.param_to_device_s, 0) << what;
        if (optimizer) EXPECT_EQ(ro.times.offload.param_to_host_s, 0) << what;
        else EXPECT_GT(ro.times.offload.param_to_host_s, 0) << what;
      }
      const std::vector<float> pd = dev->params();
      EXPECT_EQ(differing_elements(off->params(), pd), "equal") << what;
      std::vector<float> md, mo, m1, m2, v1, v2;
      dev->read_owned_state(md, m1, v1);
      off->read_owned_state(mo, m2, v2);
      EXPECT_EQ(differing_elements(mo, md), "equal") << what << ": master";
      EXPECT_EQ(differing_elements(m2, m1), "equal") << what << ": AdamW momentum";
      EXPECT_EQ(differing_elements(v2, v1), "equal") << what << ": AdamW variance";
      // The partition on the host (fp32 with the optimizer offloaded: the host master is the partition), staging
      // buffers on the GPU instead.
      const MemoryReport mem = off->memory();
      EXPECT_EQ(mem.component("params"), 0) << what;
      EXPECT_GT(mem.component("offload_buffers"), 0) << what;
      const std::int64_t part = static_cast<std::int64_t>(mo.size());
      const std::int64_t e = element_bytes(precision);
      // With the optimizer offloaded the 16-bit copy the CPU AdamW writes is the partition: no byte more.
      EXPECT_EQ(mem.host_total() - dev->memory().host_total(), optimizer ? 0 : part * e) << what;
      // set_params writes the host partition through the device's rounding.
      off->set_params(pd);
      EXPECT_EQ(off->params(), pd) << what << ": set_params";
    }
}

// ZeRO-Infinity parameter offload to NVMe (offload_param nvme) on one GPU, every precision, against the partition
// in host memory (offload_param cpu): the chunks only go through the swap files and pinned swap buffers in between
// (read ahead of their all-gathers, written back after the update), so with --deterministic the runs are equal:
// losses, parameters and states, tolerance 0. The files live under the build directory (a disk with direct I/O).
TEST(CudaTrainer, ParameterOffloadToNvmeEqualsTheHostPartition) {
  REQUIRE_GPU();
  const std::string dir = std::string(ZEROPLAN_TEST_SCRATCH_DIR) + "/nvme_cuda_param";
  std::filesystem::create_directories(dir);
  for (ExecPrecision precision : {ExecPrecision::fp32, ExecPrecision::bf16})
    for (bool optimizer : {false, true}) {
      const std::string what = to_string(precision) + (optimizer ? ", optimizer offloaded too" : ", device AdamW");
      ExecConfig c = small_model(precision);
      c.grad_accum = 2;
      c.zero.stage = 3;
      c.zero.reduce_bucket_elements = 40000;
      c.zero.param_persistence_threshold = 1000;
      c.zero.deterministic = true;
      c.zero.offload_optimizer = optimizer;
      c.zero.cpu_optimizer_threads = 4;
      c.zero.offload_param = true;
      c.zero.param_buffer_count = 2;
      c.optimizer.grad_clip = 0.5;
      ExecConfig o = c;
      o.zero.param_nvme_path = dir;
      auto host = make_cuda_trainer(c);
      auto nvme = make_cuda_trainer(o);
      EXPECT_EQ(differing_elements(nvme->params(), host->params()), "equal") << what << ": initialization";
      auto src = TokenSource::synthetic(c.shape.vocab, 12);
      for (int s = 0; s < 4; ++s) {
        const auto b = src.next_batch(c.micro_batch * c.grad_accum, c.seq_len);
        const auto rh = host->step(b.inputs, b.targets);
        const auto rn = nvme->step(b.inputs, b.targets);
        EXPECT_EQ(rn.loss, rh.loss) << what << ", step " << s;
        EXPECT_EQ(rn.grad_norm, rh.grad_norm) << what << ", step " << s;
        EXPECT_GT(rn.times.offload.param_nvme_read_bytes, 0) << what;
        EXPECT_EQ(rn.times.offload.param_nvme_write_bytes, nvme->memory().nvme_bytes) << what;
      }
      const std::vector<float> ph = host->params();
      EXPECT_EQ(differing_elements(nvme->params(), ph), "equal") << what;
      std::vector<float> mh, mn, m1, m2, v1, v2;
      host->read_owned_state(mh, m1, v1);
      nvme->read_owned_state(mn, m2, v2);
      EXPECT_EQ(differing_elements(mn, mh), "equal") << what << ": master";
      EXPECT_EQ(differing_elements(m2, m1), "equal") << what << ": AdamW momentum";
      EXPECT_EQ(differing_elements(v2, v1), "equal") << what << ": AdamW variance";
      nvme->set_params(ph);  // through the device's rounding into the files
      EXPECT_EQ(nvme->params(), ph) << what << ": set_params";
    }
  std::filesystem::remove_all(dir);
}

// fp16 under offload: the overflow is decided from the agreed norm before any update, so the skipped step leaves
// the parameters (on the GPU and the host master) as they were.
TEST(CudaTrainer, OffloadedFp16OverflowSkipsTheStep) {
  REQUIRE_GPU();
  ExecConfig c = small_model(ExecPrecision::fp16);
  c.zero.stage = 2;
  c.zero.offload_optimizer = true;
  c.loss_scale.initial_scale_power = 40;
  c.loss_scale.hysteresis = 1;
  auto gpu = make_cuda_trainer(c);
  const auto before = gpu->params();
  std::vector<float> master0, m0, v0;
  gpu->read_owned_state(master0, m0, v0);
  auto src = TokenSource::synthetic(c.shape.vocab, 2);
  const auto b = src.next_batch(c.micro_batch, c.seq_len);
  const auto r = gpu->step(b.inputs, b.targets);
  EXPECT_TRUE(r.skipped);
  EXPECT_EQ(gpu->params(), before);
  std::vector<float> master1, m1, v1;
  gpu->read_owned_state(master1, m1, v1);
  EXPECT_EQ(master1, master0);
  EXPECT_EQ(m1, m0);
  StepResult last = r;
  for (int steps = 1; last.skipped && steps < 40; ++steps) last = gpu->step(b.inputs, b.targets);
  EXPECT_FALSE(last.skipped);
  EXPECT_NE(gpu->params(), before);
}

TEST(CudaTrainer, AllocatorMatchesTheAccountingFormula) {
  REQUIRE_GPU();
  for (auto rec : {ExecRecompute::none, ExecRecompute::selective, ExecRecompute::full})
   for (bool llama : {false, true}) {
    ExecConfig c = llama ? small_llama(ExecPrecision::bf16, 128) : small_model(ExecPrecision::bf16);
    c.recompute = rec;
    c.zero.fp32_grad_accumulation = rec == ExecRecompute::selective;  // fp32 gradients and the micro-step ones
    auto gpu = make_cuda_trainer(c);
    const auto mem = gpu->memory();
    const auto expected = expected_device_memory(c);
    for (const auto& [name, bytes] : expected.components())
      EXPECT_EQ(mem.component(name), bytes) << name << (llama ? ", llama" : ", gpt2");
    EXPECT_EQ(mem.peak_total, expected.total());
    EXPECT_GT(mem.device_total, 0);
  }
}

TEST(CudaTrainer, OutOfMemoryNamesTheTensor) {
  REQUIRE_GPU();
  ExecConfig c = small_model(ExecPrecision::bf16);
  c.shape = make_shape(50257, 12288, 96, 96, 2048);  // GPT-3 175B: cannot fit one GPU
  c.seq_len = 2048;
  try {
    auto gpu = make_cuda_trainer(c);
    FAIL() << "expected DeviceOutOfMemory";
  } catch (const DeviceOutOfMemory& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("out of device memory allocating"), std::string::npos) << msg;
    EXPECT_NE(msg.find("GiB requested"), std::string::npos) << msg;
  }
  // the device is still usable afterwards
  auto ok = make_cuda_trainer(small_model(ExecPrecision::bf16));
  EXPECT_GT(ok->memory().peak_total, 0);
}

TEST(CudaTrainer, LossFallsOnText) {
  REQUIRE_GPU();
  ExecConfig c = small_model(ExecPrecision::bf16);
  c.seq_len = 64;
  c.micro_batch = 8;
  std::string text;
  for (int i = 0; i < 300; ++i) text += "the quick brown fox jumps over the lazy dog. ";
  const std::string path = ::testing::TempDir() + "fox_gpu.txt";
  { std::ofstream(path) << text; }
  auto src = TokenSource::from_file(path, c.shape.vocab);
  auto gpu = make_cuda_trainer(c);
  double first = 0, last = 0;
  for (int s = 0; s < 60; ++s) {
    const auto b = src.next_batch(c.micro_batch, c.seq_len);
    const auto r = gpu->step(b.inputs, b.targets);
    if (s == 0) first = r.loss;
    last = r.loss;
  }
  EXPECT_LT(last, 0.3 * first);
}

}  // namespace
