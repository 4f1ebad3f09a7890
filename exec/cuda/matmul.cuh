// Linear layers through cuBLASLt (16-bit or fp32 operands, fp32 accumulation), with the bias, the residual add
// and GELU fused into the GEMM epilogue where cuBLASLt offers it, plus the bias-gradient reduction kernel.
// Row-major convention (PyTorch's Linear): inp (M, K), W (N, K), out (M, N). cuBLASLt is column-major, so
// out^T (N x M) = W^T-as-stored (op T) x inp^T.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include <cublasLt.h>
#include <cuda_runtime.h>

#include "exec/cuda/cuda_common.cuh"

namespace zeroplan::exec::cuda {

using i64 = std::int64_t;

// Leading dimensions of a GEMM's column-major operands (0: packed, the default) and the product's scale.
struct GemmStrides {
  i64 lda = 0, ldb = 0, ldc = 0;
  float alpha = 1.0f;
};

class Matmul {
 public:
  // tune: time cuBLASLt's top candidates per GEMM configuration and keep the fastest; false (--deterministic)
  // takes the heuristic's first candidate, the same on every run and every rank. Timing picks by noise, and the
  // candidates (split-K or not, other tilings) round differently: two fp32 trainers with equal parameters gave
  // losses 2e-8 apart on the first step on an H200.
  Matmul(void* workspace, std::size_t workspace_bytes, bool tune = true);
  ~Matmul();
  Matmul(const Matmul&) = delete;
  Matmul& operator=(const Matmul&) = delete;

  // out = inp W^T + bias (bias may be null) + residual (may be null; may not alias out).
  template <typename T>
  void forward(T* out, const T* inp, const T* W, const T* bias, const T* residual, i64 M, i64 K, i64 N,
               cudaStream_t stream);
  // out = gelu(inp W^T + bias), pre_gelu = inp W^T + bias (kept for the GELU backward).
  template <typename T>
  void forward_gelu(T* out, T* pre_gelu, const T* inp, const T* W, const T* bias, i64 M, i64 K, i64 N,
                    cudaStream_t stream);
  // dinp (M, K) = dout (M, N) W (N, K), overwritten.
  template <typename T>
  void backward_input(T* dinp, const T* dout, const T* W, i64 M, i64 K, i64 N, cudaStream_t stream);
  // dinp (M, K) = (dout W) * gelu'(pre_gelu): the GELU backward fused into the epilogue (cuBLASLt DGELU).
  template <typename T>
  void backward_input_dgelu(T* dinp, const T* dout, const T* W, const T* pre_gelu, i64 M, i64 K, i64 N,
                            cudaStream_t stream);
  // dW (N, K) (+)= dout^T inp; accumulate adds to dW (gradient accumulation), else overwrites.
  template <typename T>
  void backward_weight(T* dW, const T* dout, const T* inp, i64 M, i64 K, i64 N, bool accumulate, cudaStream_t stream);

  // The same three products with a scale and a row stride, for LoRA's adapters (PEFT's lora_B(lora_A(x)) * scaling),
  // which act on a range of columns of a fused output (q_proj on the first q rows of the qkv weight): the matrix
  // named by `ld*` is a column range of a wider row-major one, `ld*` elements from one row to the next.
  // out (M, N; row stride ldo) (+)= alpha * inp (M, K; row stride ldi) W^T, W (N, K).
  template <typename T>
  void forward_strided(T* out, i64 ldo, const T* inp, i64 ldi, const T* W, i64 M, i64 K, i64 N, float alpha,
                       bool accumulate, cudaStream_t stream);
  // dinp (M, K) (+)= alpha * dout (M, N; row stride ldd) W (N, K).
  template <typename T>
  void backward_input_strided(T* dinp, const T* dout, i64 ldd, const T* W, i64 M, i64 K, i64 N, float alpha,
                              bool accumulate, cudaStream_t stream);
  // dW (N, K) (+)= alpha * dout^T inp, dout (M, N; row stride ldd), inp (M, K).
  template <typename T>
  void backward_weight_strided(T* dW, const T* dout, i64 ldd, const T* inp, i64 M, i64 K, i64 N, float alpha,
                               bool accumulate, cudaStream_t stream);

 private:
  template <typename T>
  bool run(T* D, const T* A, const T* B, const T* C, i64 m, i64 n, i64 k, bool transa, bool transb, float beta,
           cublasLtEpilogue_t epilogue, const T* bias, T* aux, cudaStream_t stream, bool allow_failure,
           const GemmStrides& strides = GemmStrides{});
  void release() noexcept;  // the handle and events (the destructor, and a constructor that throws)
  cublasLtHandle_t handle_ = nullptr;
  // Chosen algorithm per GEMM configuration (per instance: a Matmul serves one device). The first call of a
  // configuration times cuBLASLt's top kCandidates heuristic candidates and keeps the fastest; GEMMs that
  // accumulate into their output (beta = 1 with C == D) are not re-run and take the first heuristic.
  static constexpr int kCandidates = 8;  // 16 measured no faster: 46,319 / 46,468 vs 46,460 / 46,451 tokens/s
  std::map<std::string, cublasLtMatmulAlgo_t> algos_;
  cudaEvent_t tune_start_ = nullptr, tune_stop_ = nullptr;
  void* workspace_;
  std::size_t workspace_bytes_;
  bool tune_;
};

// dbias (N) (+)= column sums of dout (M, N) into `sums` (cuda_common.cuh: column_sum_scratch_floats(M, N,
// deterministic) floats); one launch. cuBLASLt's BGRADB epilogue computes the same sums inside the
// dW GEMM but measured slower on an H200 (GPT-2 1.5B, mb 8: 39.5 ms per step for the fused GEMMs vs 32.7 + 4.8 ms
// GEMM + this kernel), so it is not used.
template <typename T>
void bias_backward(T* dbias, const T* dout, const ColumnSums& sums, i64 M, i64 N, bool accumulate,
                   cudaStream_t stream);

}  // namespace zeroplan::exec::cuda
