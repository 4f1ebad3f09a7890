// Can stage 3's AdamW run beside the next forward's GEMMs? (issue 35: Llama-2 7B stage 3 on two H200 spends 27 ms of
// its 329 ms step in the AdamW over each rank's 3.37e9-element partition, after the backward; 2026-11-30 call18 showed
// that at the lowest stream priority the update gets no SMs beside cuBLASLt's GEMMs.) This probe times, on one GPU:
//   - the forward GEMMs of Llama-2 7B's 32 blocks at micro-batch 2 x 2048 (q/k/v, o, gate/up, down), bf16;
//   - an AdamW over N fp32 elements (master, m, v read and written, bf16 gradient read: 26 bytes an element);
//   - both at once: the GEMMs on the highest-priority stream told to use SMs - R (cuBLASLt's
//     CUBLASLT_MATMUL_DESC_SM_COUNT_TARGET), the AdamW on the lowest-priority stream.
// Built with the executor (bench/CMakeLists.txt): build/bench/overlap_probe [ADAMW_ELEMENTS], default 3.37e9.
#include "exec/cuda/cuda_check.h"

#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>


using i64 = long long;

__global__ void adamw_kernel(float* w, float* m, float* v, const __nv_bfloat16* g, i64 n) {
  const i64 i = (static_cast<i64>(blockIdx.x) * blockDim.x + threadIdx.x) * 8;
  if (i + 8 > n) return;
  float4 w0 = *reinterpret_cast<float4*>(w + i), w1 = *reinterpret_cast<float4*>(w + i + 4);
  float4 m0 = *reinterpret_cast<float4*>(m + i), m1 = *reinterpret_cast<float4*>(m + i + 4);
  float4 v0 = *reinterpret_cast<float4*>(v + i), v1 = *reinterpret_cast<float4*>(v + i + 4);
  const uint4 graw = *reinterpret_cast<const uint4*>(g + i);
  const __nv_bfloat16* gb = reinterpret_cast<const __nv_bfloat16*>(&graw);
  float* W[2] = {&w0.x, &w1.x};
  float* M[2] = {&m0.x, &m1.x};
  float* V[2] = {&v0.x, &v1.x};
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    float& ww = W[j / 4][j % 4];
    float& mm = M[j / 4][j % 4];
    float& vv = V[j / 4][j % 4];
    const float gg = __bfloat162float(gb[j]);
    mm = 0.9f * mm + 0.1f * gg;
    vv = 0.95f * vv + 0.05f * gg * gg;
    ww -= 1e-4f * (mm / 0.1f / (sqrtf(vv / 0.05f) + 1e-8f) + 0.1f * ww);
  }
  *reinterpret_cast<float4*>(w + i) = w0;
  *reinterpret_cast<float4*>(w + i + 4) = w1;
  *reinterpret_cast<float4*>(m + i) = m0;
  *reinterpret_cast<float4*>(m + i + 4) = m1;
  *reinterpret_cast<float4*>(v + i) = v0;
  *reinterpret_cast<float4*>(v + i + 4) = v1;
}

// Uniform [-1, 1) from a hash of the index: GEMMs on zeros draw less power and run faster than on real data.
__global__ void fill_kernel(__nv_bfloat16* x, i64 n) {
  const i64 i = static_cast<i64>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  unsigned long long h = static_cast<unsigned long long>(i) * 0x9E3779B97F4A7C15ULL;
  h ^= h >> 31;
  h *= 0xBF58476D1CE4E5B9ULL;
  h ^= h >> 27;
  x[i] = __float2bfloat16(static_cast<float>(h >> 40) / 16777216.0f * 2.0f - 1.0f);
}
void fill(void* p, i64 n) {
  fill_kernel<<<static_cast<unsigned>((n + 255) / 256), 256>>>(static_cast<__nv_bfloat16*>(p), n);
  CUDA_CHECK(cudaGetLastError());
}

struct Gemm {
  cublasLtMatmulDesc_t op{};
  cublasLtMatrixLayout_t la{}, lb{}, lc{};
  cublasLtMatmulAlgo_t algo{};
  const void *A, *B;
  void* D;
};

int run_probe(int argc, char** argv) {
  i64 n = 3370000000LL;  // one rank's partition of Llama-2 7B on two GPUs
  if (argc > 1) {
    char* end = nullptr;
    n = std::strtoll(argv[1], &end, 10);
    if (*argv[1] == '\0' || *end != '\0' || n < 8) {
      std::fprintf(stderr, "overlap_probe: ADAMW_ELEMENTS must be an integer of at least 8, got '%s'\n", argv[1]);
      return 2;
    }
  }
  int sms = 0;
  CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  int lo_prio = 0, hi_prio = 0;
  CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&lo_prio, &hi_prio));
  cudaStream_t hi, lo;
  CUDA_CHECK(cudaStreamCreateWithPriority(&hi, cudaStreamNonBlocking, hi_prio));
  CUDA_CHECK(cudaStreamCreateWithPriority(&lo, cudaStreamNonBlocking, lo_prio));
  cublasLtHandle_t lt;
  CUBLAS_CHECK(cublasLtCreate(&lt));
  const size_t ws_bytes = 64 << 20;
  void* ws;
  CUDA_CHECK(cudaMalloc(&ws, ws_bytes));

  // Llama-2 7B block, micro-batch 2 x 2048: out[M x N] = in[M x K] W^T, as exec/cuda/matmul.cu's forward.
  const i64 M = 4096;
  const i64 shapes[4][2] = {{12288, 4096}, {4096, 4096}, {22016, 4096}, {4096, 11008}};
  const int layers = 32;
  std::vector<void*> weights(4), outs(4);
  void* in;
  CUDA_CHECK(cudaMalloc(&in, M * 11008 * 2));
  fill(in, M * 11008);
  for (int s = 0; s < 4; ++s) {
    CUDA_CHECK(cudaMalloc(&weights[s], shapes[s][0] * shapes[s][1] * 2));
    fill(weights[s], shapes[s][0] * shapes[s][1]);
    CUDA_CHECK(cudaMalloc(&outs[s], M * shapes[s][0] * 2));
  }
  const auto make = [&](int target) {
    std::vector<Gemm> gs(4);
    for (int s = 0; s < 4; ++s) {
      Gemm& g = gs[s];
      const i64 N = shapes[s][0], K = shapes[s][1];
      CUBLAS_CHECK(cublasLtMatmulDescCreate(&g.op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
      const cublasOperation_t t = CUBLAS_OP_T, nn = CUBLAS_OP_N;
      CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(g.op, CUBLASLT_MATMUL_DESC_TRANSA, &t, sizeof(t)));
      CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(g.op, CUBLASLT_MATMUL_DESC_TRANSB, &nn, sizeof(nn)));
      const int32_t tgt = target;
      CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(g.op, CUBLASLT_MATMUL_DESC_SM_COUNT_TARGET, &tgt, sizeof(tgt)));
      CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&g.la, CUDA_R_16BF, K, N, K));
      CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&g.lb, CUDA_R_16BF, K, M, K));
      CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&g.lc, CUDA_R_16BF, N, M, N));
      cublasLtMatmulPreference_t pref;
      CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
      CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws_bytes,
                                              sizeof(ws_bytes)));
      cublasLtMatmulHeuristicResult_t h[1];
      int found = 0;
      CUBLAS_CHECK(cublasLtMatmulAlgoGetHeuristic(lt, g.op, g.la, g.lb, g.lc, g.lc, pref, 1, h, &found));
      if (found < 1) {
        std::fprintf(stderr, "no algorithm\n");
        std::exit(1);
      }
      g.algo = h[0].algo;
      g.A = weights[s];
      g.B = in;
      g.D = outs[s];
      cublasLtMatmulPreferenceDestroy(pref);
    }
    return gs;
  };
  const float alpha = 1.0f, beta = 0.0f;
  const auto forward = [&](const std::vector<Gemm>& gs, cudaStream_t st) {
    for (int l = 0; l < layers; ++l)
      for (const Gemm& g : gs)
        CUBLAS_CHECK(cublasLtMatmul(lt, g.op, &alpha, g.A, g.la, g.B, g.lb, &beta, g.D, g.lc, g.D, g.lc, &g.algo, ws, ws_bytes,
                          st));
  };

  float *w, *m, *v;
  __nv_bfloat16* g;
  CUDA_CHECK(cudaMalloc(&w, n * 4));
  CUDA_CHECK(cudaMalloc(&m, n * 4));
  CUDA_CHECK(cudaMalloc(&v, n * 4));
  CUDA_CHECK(cudaMalloc(&g, n * 2));
  CUDA_CHECK(cudaMemset(w, 0, n * 4));
  CUDA_CHECK(cudaMemset(m, 0, n * 4));
  CUDA_CHECK(cudaMemset(v, 0, n * 4));
  CUDA_CHECK(cudaMemset(g, 0, n * 2));
  // The update as the engine issues it: one launch per gradient bucket (~5e8 elements, DeepSpeed's default).
  const i64 bucket = 500000000LL;
  const auto adamw = [&](cudaStream_t st) {
    for (i64 b = 0; b < n; b += bucket) {
      const i64 c = std::min(bucket, n - b);
      adamw_kernel<<<static_cast<unsigned>((c / 8 + 255) / 256), 256, 0, st>>>(w + b, m + b, v + b, g + b, c);
    }
    CUDA_CHECK(cudaGetLastError());
  };

  cudaEvent_t t0, t_gemm, t_adam, t1;
  CUDA_CHECK(cudaEventCreate(&t0));
  CUDA_CHECK(cudaEventCreate(&t_gemm));
  CUDA_CHECK(cudaEventCreate(&t_adam));
  CUDA_CHECK(cudaEventCreate(&t1));
  const auto ms = [](cudaEvent_t a, cudaEvent_t b) {
    float x = 0;
    CUDA_CHECK(cudaEventElapsedTime(&x, a, b));
    return static_cast<double>(x);
  };
  const double flops = 2.0 * M * layers * (12288.0 * 4096 + 4096.0 * 4096 + 22016.0 * 4096 + 4096.0 * 11008);
  std::printf("GPU SMs %d, AdamW over %lld elements (%.1f GB moved), GEMMs %.1f TFLOP\n", sms, n, 26.0 * n / 1e9,
              flops / 1e12);
  std::printf("%-34s %10s %10s %10s %10s\n", "case", "GEMMs ms", "AdamW ms", "both ms", "TFLOP/s");
  const int reps = 3;
  // Serial reference: the GEMMs then the AdamW on one stream (the engine today).
  for (int target : {0}) {
    auto gs = make(target);
    std::vector<double> a, b, c;
    forward(gs, hi);
    adamw(hi);
    for (int r = 0; r < reps; ++r) {
      CUDA_CHECK(cudaEventRecord(t0, hi));
      forward(gs, hi);
      CUDA_CHECK(cudaEventRecord(t_gemm, hi));
      adamw(hi);
      CUDA_CHECK(cudaEventRecord(t1, hi));
      CUDA_CHECK(cudaEventSynchronize(t1));
      a.push_back(ms(t0, t_gemm));
      b.push_back(ms(t_gemm, t1));
      c.push_back(ms(t0, t1));
    }
    std::sort(a.begin(), a.end());
    std::sort(b.begin(), b.end());
    std::sort(c.begin(), c.end());
    std::printf("%-34s %10.2f %10.2f %10.2f %10.1f\n", "serial, all SMs", a[1], b[1], c[1], flops / a[1] / 1e9);
  }
  for (int reserve : {0, 8, 16, 24, 32, 48}) {
    auto gs = make(reserve == 0 ? 0 : sms - reserve);
    // GEMMs alone at this target
    std::vector<double> alone, gem, ada, both;
    forward(gs, hi);
    CUDA_CHECK(cudaStreamSynchronize(hi));
    for (int r = 0; r < reps; ++r) {
      CUDA_CHECK(cudaEventRecord(t0, hi));
      forward(gs, hi);
      CUDA_CHECK(cudaEventRecord(t1, hi));
      CUDA_CHECK(cudaEventSynchronize(t1));
      alone.push_back(ms(t0, t1));
      // both at once: the AdamW issued first on the low-priority stream, the GEMMs right after
      CUDA_CHECK(cudaEventRecord(t0, hi));
      CUDA_CHECK(cudaStreamWaitEvent(lo, t0));
      adamw(lo);
      CUDA_CHECK(cudaEventRecord(t_adam, lo));
      forward(gs, hi);
      CUDA_CHECK(cudaEventRecord(t_gemm, hi));
      CUDA_CHECK(cudaStreamWaitEvent(hi, t_adam));
      CUDA_CHECK(cudaEventRecord(t1, hi));
      CUDA_CHECK(cudaEventSynchronize(t1));
      gem.push_back(ms(t0, t_gemm));
      ada.push_back(ms(t0, t_adam));
      both.push_back(ms(t0, t1));
    }
    for (auto* x : {&alone, &gem, &ada, &both}) std::sort(x->begin(), x->end());
    char name[64];
    std::snprintf(name, sizeof name, "GEMMs alone, %d SMs kept free", reserve);
    std::printf("%-34s %10.2f %10s %10s %10.1f\n", name, alone[1], "", "", flops / alone[1] / 1e9);
    std::snprintf(name, sizeof name, "beside AdamW, %d SMs kept free", reserve);
    std::printf("%-34s %10.2f %10.2f %10.2f %10.1f\n", name, gem[1], ada[1], both[1], flops / gem[1] / 1e9);
  }
  return 0;
}

int main(int argc, char** argv) {
  try {
    return run_probe(argc, argv);
  } catch (const zeroplan::exec::CudaError& e) {  // no GPU, or a failed CUDA / cuBLASLt call (file:line)
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
}
