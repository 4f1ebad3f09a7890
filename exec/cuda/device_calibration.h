// What `zeroplan calibrate` measures on one GPU (run/calibration.h assembles the cluster description): the
// device's identity and the memory a CUDA context takes, bf16 GEMM time through the executor's own cuBLASLt
// matmul (exec/cuda/matmul.cuh), the trainer's attention (cuDNN's fused attention or the executor's kernels),
// device-to-device copy bandwidth, pinned host<->device copy bandwidth, and the device buffers and stream waits the
// collective sweep needs. Plain C++ header (no CUDA types), so run/ can call
// it. Every CUDA call is checked (exec/cuda/cuda_check.h). Times come from CUDA events on the calibrator's own
// stream, each figure the median of its repeats.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

namespace zeroplan::exec::cuda {

struct DeviceFacts {
  std::string name;                 // cudaDeviceProp::name, "NVIDIA H200"
  int multiprocessors = 0;          // cudaDeviceProp::multiProcessorCount
  std::int64_t total_bytes = 0;     // cudaMemGetInfo total
  std::int64_t context_bytes = 0;   // total - free right after the context is made (cudaFree(0)), before any
                                    //   allocation of ours: the CUDA context and what the driver reserves
};

// One GEMM of the row-major convention of exec/cuda/matmul.cuh: inp (M, K), W (N, K), out (M, N).
struct GemmShape {
  std::int64_t m = 0, k = 0, n = 0;
};

// One causal self-attention of the executor's layout (exec/cuda/attention.cuh): B sequences of T tokens, hidden C
// split over NH query heads, each group of NH / kv_heads sharing one key/value head (grouped-query attention;
// 0: kv_heads = heads, multi-head attention).
struct AttentionShape {
  int batch = 0, seq = 0, hidden = 0, heads = 0, kv_heads = 0;
};

// Which attention attention_seconds times: the one the CUDA trainer would use at the shape (cuDNN's fused flash
// attention where exec/activation_accounting.h cudnn_attention_offered holds for it and cuDNN plans it, else the
// executor's kernels), or the executor's kernels whatever cuDNN offers (bench/attention_benchmark.cu, which times
// cuDNN's beside them itself).
enum class AttentionKernels { as_trained, executor };

struct AttentionSeconds {
  double forward = 0.0;   // the forward (out and logsumexp from q, k, v)
  double backward = 0.0;  // the backward (dQ with D = rowsum(dO * O), then dK and dV)
  bool cudnn = false;     // cuDNN's fused attention was timed (exec/cuda/cudnn_attention.cuh), else ours
  // What was timed: "cuDNN fused attention (engines F forward, B backward)" or "the executor's kernels
  // (exec/cuda/attention.cu)".
  std::string kernel;
  // Why cuDNN's was not timed (empty when it was): not offered at the shape (with the condition that failed),
  // cuDNN's refusal ("cuDNN refused: ..."), or the caller asked for the executor's kernels.
  std::string cudnn_note;
};

struct PinnedCopyRates {
  double host_to_device = 0.0;  // bytes/s
  double device_to_host = 0.0;  // bytes/s
};

// One device, made current on construction (cudaSetDevice), with its stream, events and cuBLASLt workspace.
class DeviceCalibrator {
 public:
  explicit DeviceCalibrator(int device);
  ~DeviceCalibrator();
  DeviceCalibrator(const DeviceCalibrator&) = delete;
  DeviceCalibrator& operator=(const DeviceCalibrator&) = delete;

  const DeviceFacts& facts() const { return facts_; }

  // Median seconds of one bf16 forward GEMM (out = inp W^T), or, with training_pass, of the three GEMMs a
  // linear layer runs per training step: forward, input gradient (dinp = dout W) and weight gradient
  // (dW = dout^T inp), 3 x 2MKN FLOPs in all. Operands hold random bf16 values in [-1, 1).
  double gemm_seconds(const GemmShape& shape, bool training_pass, int repeats);
  // Median seconds of the bf16 attention forward and backward at `shape`, on random q, k, v and output gradient,
  // through the kernels the CUDA trainer would run there (AttentionKernels::as_trained: cuDNN's fused flash
  // attention when cudnn_attention_offered's conditions hold for the shape (16-bit, T % 128 == 0, head size a
  // multiple of 8 up to 256; calibrate times the default, not --deterministic) and cuDNN plans it, with a workspace
  // of CudnnAttention::workspace_bytes allocated for the call and freed after; else the executor's kernels: the
  // flash kernels at head sizes 64 and 128, the plain kernel otherwise), or always the executor's
  // (AttentionKernels::executor). The result says which ran.
  AttentionSeconds attention_seconds(const AttentionShape& shape, int repeats,
                                     AttentionKernels kernels = AttentionKernels::as_trained);
  // Bytes read plus bytes written per second of a cudaMemcpyAsync device-to-device copy of `bytes`.
  double device_copy_bandwidth(std::int64_t bytes, int repeats);
  // cudaMemcpyAsync of `bytes` between cudaHostAlloc'd (pinned) host memory and the device, each direction
  // alone, bytes moved per second.
  PinnedCopyRates pinned_copy_bandwidth(std::int64_t bytes, int repeats);
  // cudaMemGetInfo free bytes of this device now.
  std::int64_t free_bytes() const;

 private:
  struct State;
  std::unique_ptr<State> state_;
  DeviceFacts facts_;
};

// Device memory for the collective sweep (cudaMalloc on the current device, freed on destruction).
class DeviceBuffer {
 public:
  explicit DeviceBuffer(std::int64_t bytes);
  ~DeviceBuffer();
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  void* data() const { return data_; }

 private:
  void* data_ = nullptr;
};

// Makes `device` current and its primary context exist (cudaSetDevice, cudaFree(0)).
void use_device(int device);
// cudaMemGetInfo free bytes of the current device.
std::int64_t current_device_free_bytes();
// Blocks until the work queued on `stream` (a cudaStream_t, as Communicator::comm_stream() returns it) is done.
void synchronize_stream(void* stream);
// NCCL's version as "2.28.3" (ncclGetVersion).
std::string nccl_version();

}  // namespace zeroplan::exec::cuda
