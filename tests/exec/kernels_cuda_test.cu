// GPU tests: every CUDA launcher against the CPU reference operator of the same name, on fresh random inputs
// (a whole training step against the CPU trainer: tests/exec/trainer_cuda_test.cu). Each test skips without a GPU.
// Tolerances (relative L2 error ||gpu - ref|| / ||ref||): fp32 kernels 1e-5..1e-4 (summation order);
// bf16 kernels 1e-2 (8-bit mantissa operands, fp32 accumulation).
#include <algorithm>
#include <cmath>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <gtest/gtest.h>

#include "exec/activation_accounting.h"
#include "exec/cpu/cpu_ops.h"
#include "exec/cuda/adamw.cuh"
#include "exec/cuda/attention.cuh"
#include "exec/cuda/crossentropy.cuh"
#include "exec/cuda/cuda_check.h"
#include "exec/cuda/device_allocator.h"
#include "exec/cuda/encoder.cuh"
#include "exec/cuda/gelu.cuh"
#include "exec/cuda/layernorm.cuh"
#include "exec/cuda/matmul.cuh"
#include "exec/cuda/rmsnorm.cuh"
#include "exec/cuda/rope.cuh"
#include "exec/cuda/swiglu.cuh"
#include "tests/exec/cuda_test_support.cuh"

using namespace zeroplan::exec;
using namespace zeroplan::exec::cuda_test;

namespace {

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

}  // namespace
