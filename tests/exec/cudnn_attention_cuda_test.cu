// cuDNN's fused flash attention (exec/cuda/cudnn_attention.cuh) against the CPU reference (cpu::attention_forward /
// attention_backward) and the executor's own kernels (exec/cuda/attention.cuh), bf16 and fp16, at GPT-2's head
// layout (NH = NKV = 12, HS 64) and a Llama-like grouped-query one (NH 32, NKV 8, HS 128), T = 256; each test skips
// without a GPU. Tolerances are those our kernels meet against the CPU reference (kernels_cuda_test.cu
// AttentionForwardBackward): relative L2 error 1e-2 for the output, 1e-3 for the logsumexp, 2e-2 for dq, dk, dv;
// between cuDNN's and our results twice those (both carry 16-bit rounding).
// On the GPU machine, to see why cuDNN refuses a graph:
//   CUDNN_LOGLEVEL_DBG=2 CUDNN_LOGDEST_DBG=stderr build/tests/exec/zeroplan_exec_cuda_tests --gtest_filter='CudnnAttention*'
#include <string>
#include <type_traits>
#include <vector>

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <gtest/gtest.h>

#include "exec/cpu/cpu_ops.h"
#include "exec/cuda/attention.cuh"
#include "exec/cuda/cuda_check.h"
#include "exec/cuda/cudnn_attention.cuh"
#include "tests/exec/cuda_test_support.cuh"

using namespace zeroplan::exec;
using namespace zeroplan::exec::cuda_test;

namespace {

struct Heads {
  const char* name;
  int B, T, NH, NKV, HS;
};
const Heads kShapes[] = {{"gpt2", 2, 256, 12, 12, 64}, {"llama-gqa", 1, 256, 32, 8, 128}};

// The caller's workspace, as the trainer gives its allocator's.
struct Workspace {
  void* d = nullptr;
  std::int64_t bytes = 0;
  explicit Workspace(std::int64_t n) : bytes(n) { CUDA_CHECK(cudaMalloc(&d, static_cast<std::size_t>(n))); }
  ~Workspace() { cudaFree(d); }
};

// dq, dk and dv of a dqkv buffer, apart.
struct Parts {
  std::vector<float> q, k, v;
};
Parts split(const std::vector<float>& dqkv, const Heads& h) {
  const int C = h.NH * h.HS, W = (h.NH + 2 * h.NKV) * h.HS;
  Parts p;
  for (int i = 0; i < h.B * h.T; ++i)
    for (int c = 0; c < W; ++c) {
      const float x = dqkv[static_cast<std::size_t>(i) * W + c];
      if (c < C) p.q.push_back(x);
      else if (c < C + h.NKV * h.HS) p.k.push_back(x);
      else p.v.push_back(x);
    }
  return p;
}

template <typename T>
constexpr ExecPrecision precision_of() {
  return std::is_same_v<T, __half> ? ExecPrecision::fp16 : ExecPrecision::bf16;
}

template <typename T>
void compare_with_reference_and_ours() {
  for (const Heads& h : kShapes) {
    const int C = h.NH * h.HS, W = (h.NH + 2 * h.NKV) * h.HS, B = h.B, Tn = h.T;
    const std::string what = std::string(h.name) + ", " + to_string(precision_of<T>());
    auto qkv = randn(static_cast<std::size_t>(B) * Tn * W, 11 + h.HS), dout = randn(static_cast<std::size_t>(B) * Tn * C, 12 + h.HS);
    Buf<T> QKV(qkv), O(B * Tn * C), O2(B * Tn * C), DO(dout), DQKV(B * Tn * W), DQKV2(B * Tn * W), DQKV3(B * Tn * W);
    Buf<float> lse(B * h.NH * Tn), lse2(B * h.NH * Tn), drow(B * h.NH * Tn);

    cudaStream_t stream = nullptr;
    CUDA_CHECK(cudaStreamCreate(&stream));
    {
      cuda::CudnnAttention cudnn(stream, /*deterministic=*/false);
      const cuda::CudnnAttentionShape shape{B, Tn, h.NH, h.NKV, h.HS, precision_of<T>()};
      Workspace ws(cuda::CudnnAttention::workspace_bytes(shape, false));
      cudnn.set_workspace(ws.d, ws.bytes);
      std::string why;
      ASSERT_TRUE(cudnn.supported(shape, &why)) << what << ": " << why;
      const cuda::CudnnAttention::PlanInfo first = cudnn.plan_info(shape);
      std::printf("[ cudnn    ] %s: engines %lld (forward, workspace %lld B), %lld (backward, workspace %lld B)\n",
                  what.c_str(), static_cast<long long>(first.forward_engine),
                  static_cast<long long>(first.forward_workspace), static_cast<long long>(first.backward_engine),
                  static_cast<long long>(first.backward_workspace));

      // forward: cuDNN, ours, the CPU reference
      cudnn.forward(shape, O.d, lse.d, QKV.d);
      CUDA_CHECK(cudaStreamSynchronize(stream));
      cuda::attention_forward<T>(O2.d, lse2.d, QKV.d, B, Tn, h.NH, h.NKV, h.HS, stream);
      CUDA_CHECK(cudaStreamSynchronize(stream));
      const auto o_cudnn = O.get(), o_ours = O2.get(), l_cudnn = lse.get(), l_ours = lse2.get();
      std::vector<float> o(static_cast<std::size_t>(B) * Tn * C), l(static_cast<std::size_t>(B) * h.NH * Tn);
      cpu::attention_forward(o.data(), l.data(), qkv.data(), B, Tn, h.NH, h.NKV, h.HS);
      EXPECT_LT(rel_err(o_cudnn, o), 1e-2) << "cuDNN output, " << what;
      EXPECT_LT(rel_err(l_cudnn, l), 1e-3) << "cuDNN Stats as our logsumexp, " << what;
      EXPECT_LT(rel_err(o_cudnn, o_ours), 2e-2) << "cuDNN against our output, " << what;
      EXPECT_LT(rel_err(l_cudnn, l_ours), 2e-3) << "cuDNN against our logsumexp, " << what;

      // backward from cuDNN's forward: cuDNN, ours (reading cuDNN's out and lse: the two paths interchange), CPU
      cudnn.backward(shape, DQKV.d, DO.d, QKV.d, O.d, lse.d);
      CUDA_CHECK(cudaStreamSynchronize(stream));
      cuda::attention_backward<T>(DQKV2.d, drow.d, DO.d, QKV.d, O.d, lse.d, B, Tn, h.NH, h.NKV, h.HS, stream);
      CUDA_CHECK(cudaStreamSynchronize(stream));
      std::vector<float> dqkv(static_cast<std::size_t>(B) * Tn * W);
      cpu::attention_backward(dqkv.data(), dout.data(), qkv.data(), o_cudnn.data(), l_cudnn.data(), B, Tn, h.NH,
                              h.NKV, h.HS);
      const Parts got = split(DQKV.get(), h), ours = split(DQKV2.get(), h), ref = split(dqkv, h);
      EXPECT_LT(rel_err(got.q, ref.q), 2e-2) << "cuDNN dQ, " << what;
      EXPECT_LT(rel_err(got.k, ref.k), 2e-2) << "cuDNN dK, " << what;
      EXPECT_LT(rel_err(got.v, ref.v), 2e-2) << "cuDNN dV, " << what;
      EXPECT_LT(rel_err(got.q, ours.q), 4e-2) << "cuDNN against our dQ, " << what;
      EXPECT_LT(rel_err(got.k, ours.k), 4e-2) << "cuDNN against our dK, " << what;
      EXPECT_LT(rel_err(got.v, ours.v), 4e-2) << "cuDNN against our dV, " << what;

      // cuDNN's backward reading our forward's out and lse
      cudnn.backward(shape, DQKV3.d, DO.d, QKV.d, O2.d, lse2.d);
      CUDA_CHECK(cudaStreamSynchronize(stream));
      const Parts mixed = split(DQKV3.get(), h);
      EXPECT_LT(rel_err(mixed.q, ours.q), 4e-2) << "cuDNN backward from our forward, dQ, " << what;
      EXPECT_LT(rel_err(mixed.v, ours.v), 4e-2) << "cuDNN backward from our forward, dV, " << what;

      // a second call plans nothing new: the same execution plans
      ASSERT_TRUE(cudnn.supported(shape, &why)) << what;
      const cuda::CudnnAttention::PlanInfo second = cudnn.plan_info(shape);
      EXPECT_EQ(cudnn.planned_shapes(), 1u) << what;
      EXPECT_EQ(second.forward_plan, first.forward_plan) << what;
      EXPECT_EQ(second.backward_plan, first.backward_plan) << what;
      EXPECT_EQ(second.forward_engine, first.forward_engine) << what;
      EXPECT_EQ(second.backward_engine, first.backward_engine) << what;
    }
    CUDA_CHECK(cudaStreamDestroy(stream));
  }
}

}  // namespace

TEST(CudnnAttention, Bf16MatchesReferenceAndOurKernels) {
  REQUIRE_GPU();
  compare_with_reference_and_ours<__nv_bfloat16>();
}

TEST(CudnnAttention, Fp16MatchesReferenceAndOurKernels) {
  REQUIRE_GPU();
  compare_with_reference_and_ours<__half>();
}

// --deterministic: cuDNN's deterministic backward (the dP-workspace graph, engines without the NONDETERMINISTIC
// note) where cuDNN offers one: the same bits twice, and the reference's values; otherwise the refusal is reported
// and the trainer would use our (bit-reproducible) kernels.
TEST(CudnnAttention, DeterministicBackwardRepeatsOrIsRefused) {
  REQUIRE_GPU();
  using T = __nv_bfloat16;
  for (const Heads& h : kShapes) {
    const int C = h.NH * h.HS, W = (h.NH + 2 * h.NKV) * h.HS, B = h.B, Tn = h.T;
    const cuda::CudnnAttentionShape shape{B, Tn, h.NH, h.NKV, h.HS, ExecPrecision::bf16};
    cuda::CudnnAttention cudnn(nullptr, /*deterministic=*/true);
    std::string why;
    if (!cudnn.supported(shape, &why)) {
      std::printf("[ cudnn    ] %s deterministic: refused: %s\n", h.name, why.c_str());
      EXPECT_FALSE(why.empty());
      continue;
    }
    const cuda::CudnnAttention::PlanInfo info = cudnn.plan_info(shape);
    std::printf("[ cudnn    ] %s deterministic: engines %lld / %lld, backward workspace %lld B\n", h.name,
                static_cast<long long>(info.forward_engine), static_cast<long long>(info.backward_engine),
                static_cast<long long>(info.backward_workspace));
    Workspace ws(cuda::CudnnAttention::workspace_bytes(shape, true));
    cudnn.set_workspace(ws.d, ws.bytes);
    auto qkv = randn(static_cast<std::size_t>(B) * Tn * W, 21), dout = randn(static_cast<std::size_t>(B) * Tn * C, 22);
    Buf<T> QKV(qkv), O(B * Tn * C), DO(dout), D1(B * Tn * W), D2(B * Tn * W);
    Buf<float> lse(B * h.NH * Tn);
    cudnn.forward(shape, O.d, lse.d, QKV.d);
    cudnn.backward(shape, D1.d, DO.d, QKV.d, O.d, lse.d);
    cudnn.backward(shape, D2.d, DO.d, QKV.d, O.d, lse.d);
    const auto first = D1.get(), second = D2.get();
    EXPECT_EQ(differing_elements(second, first), "equal") << h.name;
    std::vector<float> dqkv(static_cast<std::size_t>(B) * Tn * W);
    const auto o = O.get(), l = lse.get();
    cpu::attention_backward(dqkv.data(), dout.data(), qkv.data(), o.data(), l.data(), B, Tn, h.NH, h.NKV, h.HS);
    EXPECT_LT(rel_err(first, dqkv), 2e-2) << h.name;
  }
}

// What cuDNN is not asked for: fp32, T not a multiple of 128, heads not a multiple of the key/value heads. The
// refusal is a reason, not an exception, and is remembered (no second planning).
TEST(CudnnAttention, RefusesWithAReason) {
  REQUIRE_GPU();
  cuda::CudnnAttention cudnn(nullptr, false);
  std::string why;
  EXPECT_FALSE(cudnn.supported({2, 256, 12, 12, 64, ExecPrecision::fp32}, &why));
  EXPECT_NE(why.find("fp32"), std::string::npos) << why;
  EXPECT_FALSE(cudnn.supported({2, 200, 12, 12, 64, ExecPrecision::bf16}, &why));
  EXPECT_NE(why.find("128"), std::string::npos) << why;
  EXPECT_FALSE(cudnn.supported({2, 256, 12, 5, 64, ExecPrecision::bf16}, &why));
  EXPECT_FALSE(why.empty());
  EXPECT_FALSE(cudnn.supported({2, 200, 12, 12, 64, ExecPrecision::bf16}, &why));
  EXPECT_EQ(cudnn.planned_shapes(), 3u);
  EXPECT_THROW(cudnn.plan_info({2, 200, 12, 12, 64, ExecPrecision::bf16}), std::invalid_argument);
}
