#include "exec/cuda/cudnn_conv.cuh"

#include <stdexcept>

#include <cudnn.h>

#include "exec/cuda/cuda_check.h"

namespace zeroplan::exec::cuda {

namespace {

[[noreturn]] void throw_cudnn(cudnnStatus_t st, const char* call, const char* file, int line) {
  throw CudaError(std::string("cuDNN error ") + cudnnGetErrorString(st) + " in " + call + " at " + file + ":" +
                  std::to_string(line));
}

#define CUDNN_CHECK(call)                                                            \
  do {                                                                               \
    cudnnStatus_t zp_st_ = (call);                                                   \
    if (zp_st_ != CUDNN_STATUS_SUCCESS) throw_cudnn(zp_st_, #call, __FILE__, __LINE__); \
  } while (0)

cudnnDataType_t data_type(ExecPrecision p) {
  switch (p) {
    case ExecPrecision::fp32: return CUDNN_DATA_FLOAT;
    case ExecPrecision::fp16: return CUDNN_DATA_HALF;
    case ExecPrecision::bf16: return CUDNN_DATA_BFLOAT16;
  }
  throw std::invalid_argument("cudnn: unknown precision");
}

std::string describe(const ConvShape& s) {
  return std::to_string(s.N) + "x" + std::to_string(s.C) + "x" + std::to_string(s.H) + "x" + std::to_string(s.W) +
         " -> " + std::to_string(s.K) + " k" + std::to_string(s.R) + " s" + std::to_string(s.stride) + " p" +
         std::to_string(s.padding) + (s.groups > 1 ? " g" + std::to_string(s.groups) : "");
}

int to_int(i64 v, const char* what, i64 least = 1) {
  if (v < least || v > (1ll << 31) - 1)
    throw std::invalid_argument(std::string("cudnn: ") + what + " " + std::to_string(v) + " outside [" +
                                std::to_string(least) + ", 2^31)");
  return static_cast<int>(v);
}

// An algorithm may be kept when cuDNN supports it, it fits the workspace, it is deterministic when asked, and for
// fp32 data it computes with FMA math only: CUDNN_DEFAULT_MATH lets fp32 convolutions run in TF32 on Ampere and later
// (cuDNN's "Tensor Core operations are permitted"), whose 10-bit mantissa put the H200's fp32 ResNet-101 step 9e-5
// from torchvision's loss. fp32 also leaves out the transform algorithms (FFT, Winograd), whose arithmetic is not the
// direct sum's. So restricted, the step's loss is 2.2e-6 from the fp64 step's, torchvision's own fp32 3.7e-5
// (batch 8, bench/resnet/device_resnet.sh 'correct').
bool transform_algorithm(cudnnConvolutionFwdAlgo_t a) {
  return a == CUDNN_CONVOLUTION_FWD_ALGO_FFT || a == CUDNN_CONVOLUTION_FWD_ALGO_FFT_TILING ||
         a == CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD || a == CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD_NONFUSED;
}
bool transform_algorithm(cudnnConvolutionBwdDataAlgo_t a) {
  return a == CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT || a == CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT_TILING ||
         a == CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD || a == CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD_NONFUSED;
}
bool transform_algorithm(cudnnConvolutionBwdFilterAlgo_t a) {
  return a == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_FFT || a == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_FFT_TILING ||
         a == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_WINOGRAD_NONFUSED;
}

template <typename Perf>
bool qualifies(const Perf& perf, bool deterministic, bool fp32, std::size_t workspace) {
  return perf.status == CUDNN_STATUS_SUCCESS && perf.memory <= workspace &&
         (!deterministic || perf.determinism == CUDNN_DETERMINISTIC) &&
         (!fp32 || (perf.mathType == CUDNN_FMA_MATH && !transform_algorithm(perf.algo)));
}

}  // namespace

struct CudnnConvolutions::Plan {
  ConvShape shape;
  cudnnTensorDescriptor_t x = nullptr, y = nullptr;
  cudnnFilterDescriptor_t w = nullptr;
  cudnnConvolutionDescriptor_t fwd = nullptr, bwd_data = nullptr, bwd_filter = nullptr;  // each with its math type
  cudnnConvolutionFwdAlgo_t fwd_algo{};
  cudnnConvolutionBwdDataAlgo_t data_algo{};
  cudnnConvolutionBwdFilterAlgo_t filter_algo{};
  float fwd_ms = 0, data_ms = 0, filter_ms = 0;
  ~Plan() {
    if (bwd_filter) cudnnDestroyConvolutionDescriptor(bwd_filter);
    if (bwd_data) cudnnDestroyConvolutionDescriptor(bwd_data);
    if (fwd) cudnnDestroyConvolutionDescriptor(fwd);
    if (w) cudnnDestroyFilterDescriptor(w);
    if (y) cudnnDestroyTensorDescriptor(y);
    if (x) cudnnDestroyTensorDescriptor(x);
  }
};

CudnnConvolutions::CudnnConvolutions(ExecPrecision precision, cudaStream_t stream, void* workspace,
                                     std::size_t workspace_bytes, bool deterministic)
    : precision_(precision), stream_(stream), workspace_(workspace), workspace_bytes_(workspace_bytes),
      deterministic_(deterministic) {
  cudnnHandle_t h = nullptr;
  CUDNN_CHECK(cudnnCreate(&h));
  handle_ = h;
  try {
    CUDNN_CHECK(cudnnSetStream(h, stream_));
    CUDA_CHECK(cudaEventCreate(&timing_start_));
    CUDA_CHECK(cudaEventCreate(&timing_end_));
  } catch (...) {
    release();
    throw;
  }
}

CudnnConvolutions::~CudnnConvolutions() { release(); }

void CudnnConvolutions::release() noexcept {
  plans_.clear();
  if (timing_end_) cudaEventDestroy(timing_end_);
  if (timing_start_) cudaEventDestroy(timing_start_);
  timing_start_ = timing_end_ = nullptr;
  if (handle_) cudnnDestroy(static_cast<cudnnHandle_t>(handle_));
  handle_ = nullptr;
}

// The algorithm to keep among cuDNN's ranking `perf` (best first): the first that qualifies under --deterministic,
// else the fastest of those that qualify as `run` (which launches one and returns cuDNN's status) times them on the
// stream: one launch first (it loads the kernel's module), then the mean of kTimedRuns; one that cuDNN refuses for
// these buffers is passed over. Its `time` is set to the measured milliseconds.
template <typename Perf, typename Run>
Perf& CudnnConvolutions::fastest(Perf* perf, int count, bool fp32, const std::string& what, Run&& run) {
  constexpr int kTimedRuns = 3;
  Perf* best = nullptr;
  for (int i = 0; i < count; ++i) {
    Perf& a = perf[i];
    if (!qualifies(a, deterministic_, fp32, workspace_bytes_)) continue;
    if (deterministic_) return a;
    if (run(a) != CUDNN_STATUS_SUCCESS) continue;
    CUDA_CHECK(cudaEventRecord(timing_start_, stream_));
    for (int r = 0; r < kTimedRuns; ++r) CUDNN_CHECK(run(a));
    CUDA_CHECK(cudaEventRecord(timing_end_, stream_));
    CUDA_CHECK(cudaEventSynchronize(timing_end_));
    float ms = 0.0f;
    CUDA_CHECK(cudaEventElapsedTime(&ms, timing_start_, timing_end_));
    a.time = ms / kTimedRuns;
    if (!best || a.time < best->time) best = &a;
  }
  if (best) return *best;
  throw CudaError("cuDNN has no " + std::string(deterministic_ ? "deterministic " : "") +
                  (fp32 ? "direct FMA-math " : "") + "algorithm for the " + what + " within the workspace");
}

int CudnnConvolutions::plan(const ConvShape& s, void* x, void* w, void* y) {
  for (std::size_t i = 0; i < plans_.size(); ++i)
    if (plans_[i]->shape == s) return static_cast<int>(i);
  if (s.C % s.groups != 0 || s.K % s.groups != 0 || s.OH() < 1 || s.OW() < 1)
    throw std::invalid_argument("cudnn: convolution " + describe(s) + " has no valid output or groups");
  const cudnnHandle_t h = static_cast<cudnnHandle_t>(handle_);
  auto p = std::make_unique<Plan>();
  p->shape = s;
  const cudnnDataType_t dt = data_type(precision_);
  CUDNN_CHECK(cudnnCreateTensorDescriptor(&p->x));
  CUDNN_CHECK(cudnnCreateTensorDescriptor(&p->y));
  CUDNN_CHECK(cudnnCreateFilterDescriptor(&p->w));
  CUDNN_CHECK(cudnnSetTensor4dDescriptor(p->x, CUDNN_TENSOR_NHWC, dt, to_int(s.N, "N"), to_int(s.C, "C"),
                                         to_int(s.H, "H"), to_int(s.W, "W")));
  CUDNN_CHECK(cudnnSetTensor4dDescriptor(p->y, CUDNN_TENSOR_NHWC, dt, to_int(s.N, "N"), to_int(s.K, "K"),
                                         to_int(s.OH(), "OH"), to_int(s.OW(), "OW")));
  CUDNN_CHECK(cudnnSetFilter4dDescriptor(p->w, dt, CUDNN_TENSOR_NHWC, to_int(s.K, "K"), to_int(s.C / s.groups, "C"),
                                         to_int(s.R, "R"), to_int(s.R, "S")));
  // fp32 math for every precision; tensor cores for 16-bit data, plain FMA (no TF32) for fp32 data.
  const cudnnMathType_t math = precision_ == ExecPrecision::fp32 ? CUDNN_FMA_MATH : CUDNN_TENSOR_OP_MATH;
  for (cudnnConvolutionDescriptor_t* d : {&p->fwd, &p->bwd_data, &p->bwd_filter}) {
    CUDNN_CHECK(cudnnCreateConvolutionDescriptor(d));
    CUDNN_CHECK(cudnnSetConvolution2dDescriptor(*d, to_int(s.padding, "padding", 0),
                                                to_int(s.padding, "padding", 0), to_int(s.stride, "stride"),
                                                to_int(s.stride, "stride"), to_int(s.dilation, "dilation"),
                                                to_int(s.dilation, "dilation"), CUDNN_CROSS_CORRELATION,
                                                CUDNN_DATA_FLOAT));
    CUDNN_CHECK(cudnnSetConvolutionGroupCount(*d, to_int(s.groups, "groups")));
    CUDNN_CHECK(cudnnSetConvolutionMathType(*d, math));
  }
  const std::string what = "convolution " + describe(s);
  const bool fp32 = precision_ == ExecPrecision::fp32;
  // cuDNN's heuristic ranking of every algorithm (with its workspace, determinism and math type); under
  // --deterministic the first that qualifies is kept (a choice by timing may differ between two runs, and with it
  // the result). Otherwise each qualifying algorithm is timed on the run's own buffers and the fastest kept, as
  // torch.backends.cudnn.benchmark does. Not with cudnnFind*Ex: it times each algorithm once, and the first launch of
  // a kernel includes loading its module (CUDA's lazy loading, the default since CUDA 12.2), so on the H200 it ranked
  // cuDNN's legacy direct kernels (already loaded) above the sm90 implicit-GEMM ones: ResNet-101's step spent 50 of
  // its 57 ms of kernel time in convolutions, 9.9 ms all told in PyTorch's (bench/resnet/kernel_profile.py).
  constexpr int kCandidates = 16;
  int found = 0;
  cudnnConvolutionFwdAlgoPerf_t fwd[kCandidates];
  CUDNN_CHECK(cudnnGetConvolutionForwardAlgorithm_v7(h, p->x, p->w, p->fwd, p->y, kCandidates, &found, fwd));
  const auto& f = fastest(fwd, found, fp32, "forward " + what, [&](const cudnnConvolutionFwdAlgoPerf_t& a) {
    CUDNN_CHECK(cudnnSetConvolutionMathType(p->fwd, a.mathType));
    const float alpha = 1.0f, beta = 0.0f;
    return cudnnConvolutionForward(h, &alpha, p->x, x, p->w, w, p->fwd, a.algo, workspace_, workspace_bytes_, &beta,
                                   p->y, y);
  });
  p->fwd_algo = f.algo;
  p->fwd_ms = f.time;
  CUDNN_CHECK(cudnnSetConvolutionMathType(p->fwd, f.mathType));
  cudnnConvolutionBwdDataAlgoPerf_t data[kCandidates];
  CUDNN_CHECK(cudnnGetConvolutionBackwardDataAlgorithm_v7(h, p->w, p->y, p->bwd_data, p->x, kCandidates, &found, data));
  const auto& d = fastest(data, found, fp32, "input gradient of the " + what,
                          [&](const cudnnConvolutionBwdDataAlgoPerf_t& a) {
    CUDNN_CHECK(cudnnSetConvolutionMathType(p->bwd_data, a.mathType));
    const float alpha = 1.0f, beta = 0.0f;
    return cudnnConvolutionBackwardData(h, &alpha, p->w, w, p->y, y, p->bwd_data, a.algo, workspace_,
                                        workspace_bytes_, &beta, p->x, x);
  });
  p->data_algo = d.algo;
  p->data_ms = d.time;
  CUDNN_CHECK(cudnnSetConvolutionMathType(p->bwd_data, d.mathType));
  cudnnConvolutionBwdFilterAlgoPerf_t filter[kCandidates];
  CUDNN_CHECK(cudnnGetConvolutionBackwardFilterAlgorithm_v7(h, p->x, p->y, p->bwd_filter, p->w, kCandidates, &found,
                                                            filter));
  const auto& g = fastest(filter, found, fp32, "weight gradient of the " + what,
                          [&](const cudnnConvolutionBwdFilterAlgoPerf_t& a) {
    CUDNN_CHECK(cudnnSetConvolutionMathType(p->bwd_filter, a.mathType));
    const float alpha = 1.0f, beta = 0.0f;
    return cudnnConvolutionBackwardFilter(h, &alpha, p->x, x, p->y, y, p->bwd_filter, a.algo, workspace_,
                                          workspace_bytes_, &beta, p->w, w);
  });
  p->filter_algo = g.algo;
  p->filter_ms = g.time;
  CUDNN_CHECK(cudnnSetConvolutionMathType(p->bwd_filter, g.mathType));
  plans_.push_back(std::move(p));
  return static_cast<int>(plans_.size() - 1);
}

void CudnnConvolutions::forward(int conv, void* y, const void* x, const void* w) {
  const Plan& p = *plans_.at(static_cast<std::size_t>(conv));
  const float alpha = 1.0f, beta = 0.0f;
  CUDNN_CHECK(cudnnConvolutionForward(static_cast<cudnnHandle_t>(handle_), &alpha, p.x, x, p.w, w, p.fwd, p.fwd_algo,
                                      workspace_, workspace_bytes_, &beta, p.y, y));
}

void CudnnConvolutions::backward_data(int conv, void* dx, const void* dy, const void* w, bool accumulate) {
  const Plan& p = *plans_.at(static_cast<std::size_t>(conv));
  const float alpha = 1.0f, beta = accumulate ? 1.0f : 0.0f;
  CUDNN_CHECK(cudnnConvolutionBackwardData(static_cast<cudnnHandle_t>(handle_), &alpha, p.w, w, p.y, dy, p.bwd_data,
                                           p.data_algo, workspace_, workspace_bytes_, &beta, p.x, dx));
}

void CudnnConvolutions::backward_filter(int conv, void* dw, const void* dy, const void* x, bool accumulate) {
  const Plan& p = *plans_.at(static_cast<std::size_t>(conv));
  const float alpha = 1.0f, beta = accumulate ? 1.0f : 0.0f;
  CUDNN_CHECK(cudnnConvolutionBackwardFilter(static_cast<cudnnHandle_t>(handle_), &alpha, p.x, x, p.y, dy,
                                             p.bwd_filter, p.filter_algo, workspace_, workspace_bytes_, &beta, p.w, dw));
}

std::vector<std::string> CudnnConvolutions::choices() const {
  std::vector<std::string> out;
  for (const auto& p : plans_)
    out.push_back(describe(p->shape) + ": forward algo " + std::to_string(static_cast<int>(p->fwd_algo)) + " (" +
                  std::to_string(p->fwd_ms) + " ms), data algo " + std::to_string(static_cast<int>(p->data_algo)) +
                  " (" + std::to_string(p->data_ms) + " ms), filter algo " +
                  std::to_string(static_cast<int>(p->filter_algo)) + " (" + std::to_string(p->filter_ms) + " ms)");
  return out;
}

}  // namespace zeroplan::exec::cuda
