#include "exec/cuda/matmul.cuh"

#include <cstdint>
#include <string>

#include "exec/cuda/cuda_common.cuh"
#include "exec/cuda/gelu.cuh"

namespace zeroplan::exec::cuda {

namespace {
template <typename T> constexpr cudaDataType_t data_type();
template <> constexpr cudaDataType_t data_type<float>() { return CUDA_R_32F; }
template <> constexpr cudaDataType_t data_type<__half>() { return CUDA_R_16F; }
template <> constexpr cudaDataType_t data_type<__nv_bfloat16>() { return CUDA_R_16BF; }

// The descriptors of one GEMM call, destroyed however the call ends (a failed CUBLAS_CHECK throws).
struct GemmDescriptors {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t la = nullptr, lb = nullptr, lc = nullptr;
  cublasLtMatmulPreference_t pref = nullptr;
  GemmDescriptors() = default;
  GemmDescriptors(const GemmDescriptors&) = delete;
  GemmDescriptors& operator=(const GemmDescriptors&) = delete;
  ~GemmDescriptors() {
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
    if (lc) cublasLtMatrixLayoutDestroy(lc);
    if (lb) cublasLtMatrixLayoutDestroy(lb);
    if (la) cublasLtMatrixLayoutDestroy(la);
    if (op) cublasLtMatmulDescDestroy(op);
  }
};

// The largest power of two (at most 256) dividing a pointer's address: cuBLASLt's heuristic assumes 256-byte
// aligned matrices unless told otherwise (CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_*_BYTES, default 256), and may pick a
// kernel that cannot run on a column range of a fused output (LoRA's q/k/v adapters). PyTorch tells it the same
// way (aten/src/ATen/cuda/CUDABlas.cpp, _getAlignment and the MIN_ALIGNMENT preferences of its cuBLASLt GEMMs).
std::uint32_t pointer_alignment(const void* p) {
  const auto address = reinterpret_cast<std::uintptr_t>(p);
  std::uint32_t alignment = 256;
  while (alignment > 1 && address % alignment != 0) alignment /= 2;
  return alignment;
}
}  // namespace

Matmul::Matmul(void* workspace, std::size_t workspace_bytes, bool tune)
    : workspace_(workspace), workspace_bytes_(workspace_bytes), tune_(tune) {
  try {
    CUBLAS_CHECK(cublasLtCreate(&handle_));
    CUDA_CHECK(cudaEventCreate(&tune_start_));
    CUDA_CHECK(cudaEventCreate(&tune_stop_));
  } catch (...) {
    release();
    throw;
  }
}
Matmul::~Matmul() { release(); }

void Matmul::release() noexcept {
  if (handle_) cublasLtDestroy(handle_);
  if (tune_start_) cudaEventDestroy(tune_start_);
  if (tune_stop_) cudaEventDestroy(tune_stop_);
  handle_ = nullptr;
  tune_start_ = tune_stop_ = nullptr;
}

template <typename T>
bool Matmul::run(T* D, const T* A, const T* B, const T* C, i64 m, i64 n, i64 k, bool transa, bool transb,
                 float beta, cublasLtEpilogue_t epilogue, const T* bias, T* aux, cudaStream_t stream,
                 bool allow_failure, const GemmStrides& strides) {
  // fp32 runs true fp32 GEMMs (no TF32) so the fp32 mode is a precise reference.
  const cublasComputeType_t compute = CUBLAS_COMPUTE_32F;
  const cudaDataType_t dt = data_type<T>();
  GemmDescriptors desc;
  cublasLtMatmulDesc_t& op = desc.op;
  cublasLtMatrixLayout_t &la = desc.la, &lb = desc.lb, &lc = desc.lc;
  cublasLtMatmulPreference_t& pref = desc.pref;
  CUBLAS_CHECK(cublasLtMatmulDescCreate(&op, compute, CUDA_R_32F));
  const cublasOperation_t ta = transa ? CUBLAS_OP_T : CUBLAS_OP_N, tb = transb ? CUBLAS_OP_T : CUBLAS_OP_N;
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)));
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)));
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof(epilogue)));
  if (bias) CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)));
  if (aux) {
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux, sizeof(aux)));
    const std::int64_t ld = m;
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &ld, sizeof(ld)));
  }
  // column-major: op(A) m x k, op(B) k x n, C/D m x n; leading dimensions packed unless given
  const i64 lda = strides.lda > 0 ? strides.lda : (transa ? k : m);
  const i64 ldb = strides.ldb > 0 ? strides.ldb : (transb ? n : k);
  const i64 ldc = strides.ldc > 0 ? strides.ldc : m;
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&la, dt, transa ? k : m, transa ? m : k, lda));
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&lb, dt, transb ? n : k, transb ? k : n, ldb));
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&lc, dt, m, n, ldc));
  CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace_bytes_,
                                                    sizeof(workspace_bytes_)));
  const std::uint32_t align_a = pointer_alignment(A), align_b = pointer_alignment(B),
                      align_c = pointer_alignment(C ? C : D), align_d = pointer_alignment(D);
  CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &align_a,
                                                    sizeof(align_a)));
  CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &align_b,
                                                    sizeof(align_b)));
  CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &align_c,
                                                    sizeof(align_c)));
  CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &align_d,
                                                    sizeof(align_d)));
  // The algorithm chosen for a configuration holds for its layouts and alignments: they are part of its key.
  const std::string key = std::to_string(static_cast<int>(dt)) + ":" + std::to_string(m) + "x" + std::to_string(n) +
                          "x" + std::to_string(k) + ":" + (transa ? "T" : "N") + (transb ? "T" : "N") + ":" +
                          std::to_string(static_cast<int>(epilogue)) + ":" + (C ? "C" : "-") + (beta != 0 ? "b" : "-") +
                          ":ld" + std::to_string(lda) + "," + std::to_string(ldb) + "," + std::to_string(ldc) + ":al" +
                          std::to_string(align_a) + "," + std::to_string(align_b) + "," + std::to_string(align_c) +
                          "," + std::to_string(align_d);
  const float alpha = strides.alpha;
  bool ok = false;
  auto it = algos_.find(key);
  if (it != algos_.end()) {
    CUBLAS_CHECK(cublasLtMatmul(handle_, op, &alpha, A, la, B, lb, &beta, C ? C : D, lc, D, lc, &it->second, workspace_,
                                workspace_bytes_, stream));
    ok = true;
  } else {
    cublasLtMatmulHeuristicResult_t heuristic[kCandidates] = {};
    int found = 0;
    const cublasStatus_t hs =
        cublasLtMatmulAlgoGetHeuristic(handle_, op, la, lb, lc, lc, pref, kCandidates, heuristic, &found);
    if (hs == CUBLAS_STATUS_SUCCESS && found > 0) {
      int best = 0;
      const bool rerun_safe = !(C == D && beta != 0);  // re-running must not change the result
      if (tune_ && rerun_safe && found > 1) {
        float best_ms = 1e30f;
        for (int i = 0; i < found; ++i) {
          // one warm-up run, then three timed
          if (cublasLtMatmul(handle_, op, &alpha, A, la, B, lb, &beta, C ? C : D, lc, D, lc, &heuristic[i].algo,
                             workspace_, workspace_bytes_, stream) != CUBLAS_STATUS_SUCCESS)
            continue;
          CUDA_CHECK(cudaEventRecord(tune_start_, stream));
          for (int r = 0; r < 3; ++r)
            CUBLAS_CHECK(cublasLtMatmul(handle_, op, &alpha, A, la, B, lb, &beta, C ? C : D, lc, D, lc,
                                        &heuristic[i].algo, workspace_, workspace_bytes_, stream));
          CUDA_CHECK(cudaEventRecord(tune_stop_, stream));
          CUDA_CHECK(cudaEventSynchronize(tune_stop_));
          float ms = 0;
          CUDA_CHECK(cudaEventElapsedTime(&ms, tune_start_, tune_stop_));
          if (ms < best_ms) {
            best_ms = ms;
            best = i;
          }
        }
      }
      algos_[key] = heuristic[best].algo;
      CUBLAS_CHECK(cublasLtMatmul(handle_, op, &alpha, A, la, B, lb, &beta, C ? C : D, lc, D, lc, &heuristic[best].algo,
                                  workspace_, workspace_bytes_, stream));
      ok = true;
    }
  }
  if (!ok && !allow_failure)
    throw CudaError("cuBLASLt found no algorithm for a " + std::to_string(m) + "x" + std::to_string(n) + "x" +
                    std::to_string(k) + " GEMM (epilogue " + std::to_string(static_cast<int>(epilogue)) + ")");
  return ok;
}

template <typename T>
void Matmul::forward(T* out, const T* inp, const T* W, const T* bias, const T* residual, i64 M, i64 K, i64 N,
                     cudaStream_t stream) {
  run<T>(out, W, inp, residual, N, M, K, true, false, residual ? 1.0f : 0.0f,
         bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT, bias, nullptr, stream, false);
}

template <typename T>
void Matmul::forward_gelu(T* out, T* pre_gelu, const T* inp, const T* W, const T* bias, i64 M, i64 K, i64 N,
                          cudaStream_t stream) {
  // cuBLASLt's GELU epilogue is the tanh approximation GPT-2 uses.
  if (run<T>(out, W, inp, nullptr, N, M, K, true, false, 0.0f, CUBLASLT_EPILOGUE_GELU_AUX_BIAS, bias, pre_gelu,
             stream, true))
    return;
  run<T>(pre_gelu, W, inp, nullptr, N, M, K, true, false, 0.0f, CUBLASLT_EPILOGUE_BIAS, bias, nullptr, stream, false);
  gelu_forward(out, pre_gelu, M * N, stream);
}

template <typename T>
void Matmul::backward_input(T* dinp, const T* dout, const T* W, i64 M, i64 K, i64 N, cudaStream_t stream) {
  run<T>(dinp, W, dout, nullptr, K, M, N, false, false, 0.0f, CUBLASLT_EPILOGUE_DEFAULT, nullptr, nullptr, stream,
         false);
}

template <typename T>
void Matmul::backward_input_dgelu(T* dinp, const T* dout, const T* W, const T* pre_gelu, i64 M, i64 K, i64 N,
                                  cudaStream_t stream) {
  if (run<T>(dinp, W, dout, nullptr, K, M, N, false, false, 0.0f, CUBLASLT_EPILOGUE_DGELU, nullptr,
             const_cast<T*>(pre_gelu), stream, true))
    return;
  run<T>(dinp, W, dout, nullptr, K, M, N, false, false, 0.0f, CUBLASLT_EPILOGUE_DEFAULT, nullptr, nullptr, stream,
         false);
  gelu_backward(dinp, pre_gelu, dinp, M * K, stream);
}

template <typename T>
void Matmul::backward_weight(T* dW, const T* dout, const T* inp, i64 M, i64 K, i64 N, bool accumulate,
                             cudaStream_t stream) {
  run<T>(dW, inp, dout, accumulate ? dW : nullptr, K, N, M, false, true, accumulate ? 1.0f : 0.0f,
         CUBLASLT_EPILOGUE_DEFAULT, nullptr, nullptr, stream, false);
}

// Row-major to cuBLASLt's column-major as above (out^T = op(W) inp^T); a row stride of a row-major matrix is the
// leading dimension of its column-major view.
template <typename T>
void Matmul::forward_strided(T* out, i64 ldo, const T* inp, i64 ldi, const T* W, i64 M, i64 K, i64 N, float alpha,
                             bool accumulate, cudaStream_t stream) {
  run<T>(out, W, inp, accumulate ? out : nullptr, N, M, K, true, false, accumulate ? 1.0f : 0.0f,
         CUBLASLT_EPILOGUE_DEFAULT, nullptr, nullptr, stream, false, GemmStrides{K, ldi, ldo, alpha});
}

template <typename T>
void Matmul::backward_input_strided(T* dinp, const T* dout, i64 ldd, const T* W, i64 M, i64 K, i64 N, float alpha,
                                    bool accumulate, cudaStream_t stream) {
  run<T>(dinp, W, dout, accumulate ? dinp : nullptr, K, M, N, false, false, accumulate ? 1.0f : 0.0f,
         CUBLASLT_EPILOGUE_DEFAULT, nullptr, nullptr, stream, false, GemmStrides{K, ldd, K, alpha});
}

template <typename T>
void Matmul::backward_weight_strided(T* dW, const T* dout, i64 ldd, const T* inp, i64 M, i64 K, i64 N, float alpha,
                                     bool accumulate, cudaStream_t stream) {
  run<T>(dW, inp, dout, accumulate ? dW : nullptr, K, N, M, false, true, accumulate ? 1.0f : 0.0f,
         CUBLASLT_EPILOGUE_DEFAULT, nullptr, nullptr, stream, false, GemmStrides{K, ldd, K, alpha});
}

namespace {
constexpr int kBiasRowGroups = 8;
constexpr int kBiasRowsPerBlock = kColumnSumRowsPerBlock;

template <typename T>
__global__ void bias_partial_kernel(T* dbias, ColumnSums sums, const T* dout, i64 M, i64 N, bool accumulate) {
  using P = Pack<T>;
  const i64 col = (static_cast<i64>(blockIdx.x) * 32 + threadIdx.x % 32) * P::kSize;
  const int group = threadIdx.x / 32;
  float acc[P::kSize] = {};
  if (col < N) {
    const i64 r0 = static_cast<i64>(blockIdx.y) * kBiasRowsPerBlock;
    const i64 r1 = min(r0 + kBiasRowsPerBlock, M);
#pragma unroll 8  // several 16-byte loads in flight per thread (the rolled loop was latency-bound)
    for (i64 r = r0 + group; r < r1; r += kBiasRowGroups) {
      const P p = P::load(dout + r * N + col);
#pragma unroll
      for (int j = 0; j < P::kSize; ++j) acc[j] += to_f(p.v[j]);
    }
  }
  __shared__ float sm[kBiasRowGroups][32 * P::kSize];
#pragma unroll
  for (int j = 0; j < P::kSize; ++j) sm[group][(threadIdx.x % 32) * P::kSize + j] = acc[j];
  __syncthreads();
  // 256 threads reduce the 8 row groups of 32*kSize columns
  for (int c = threadIdx.x; c < 32 * P::kSize; c += blockDim.x) {
    float s = 0;
#pragma unroll
    for (int g = 0; g < kBiasRowGroups; ++g) s += sm[g][c];
    const i64 gc = static_cast<i64>(blockIdx.x) * 32 * P::kSize + c;
    if (gc < N) add_column_partial(sums, N, gc, s);
  }
  last_block_finish<T>(dbias, nullptr, sums, N, accumulate);
}

}  // namespace

template <typename T>
void bias_backward(T* dbias, const T* dout, const ColumnSums& sums, i64 M, i64 N, bool accumulate,
                   cudaStream_t stream) {
  constexpr int pack = Pack<T>::kSize;
  dim3 grid(ceil_div(N, 32 * pack), ceil_div(M, kBiasRowsPerBlock));
  bias_partial_kernel<T><<<grid, 32 * kBiasRowGroups, 0, stream>>>(dbias, sums, dout, M, N, accumulate);
  CUDA_CHECK_LAUNCH();
}

#define ZP_INSTANTIATE(T)                                                                                      \
  template void Matmul::forward<T>(T*, const T*, const T*, const T*, const T*, i64, i64, i64, cudaStream_t);   \
  template void Matmul::forward_gelu<T>(T*, T*, const T*, const T*, const T*, i64, i64, i64, cudaStream_t);    \
  template void Matmul::backward_input<T>(T*, const T*, const T*, i64, i64, i64, cudaStream_t);                \
  template void Matmul::backward_input_dgelu<T>(T*, const T*, const T*, const T*, i64, i64, i64, cudaStream_t); \
  template void Matmul::backward_weight<T>(T*, const T*, const T*, i64, i64, i64, bool, cudaStream_t);         \
  template void Matmul::forward_strided<T>(T*, i64, const T*, i64, const T*, i64, i64, i64, float, bool,       \
                                           cudaStream_t);                                                      \
  template void Matmul::backward_input_strided<T>(T*, const T*, i64, const T*, i64, i64, i64, float, bool,     \
                                                  cudaStream_t);                                               \
  template void Matmul::backward_weight_strided<T>(T*, const T*, i64, const T*, i64, i64, i64, float, bool,    \
                                                   cudaStream_t);                                              \
  template void bias_backward<T>(T*, const T*, const ColumnSums&, i64, i64, bool, cudaStream_t);
ZP_INSTANTIATE(float)
ZP_INSTANTIATE(__half)
ZP_INSTANTIATE(__nv_bfloat16)
#undef ZP_INSTANTIATE

}  // namespace zeroplan::exec::cuda
