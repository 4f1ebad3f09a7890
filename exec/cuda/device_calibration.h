// What `zeroplan calibrate` measures on one GPU (run/calibration.h assembles the cluster description): the
// device's identity and the memory a CUDA context takes, bf16 GEMM time through the executor's own cuBLASLt
// matmul (exec/cuda/matmul.cuh), the executor's attention kernels, device-to-device copy bandwidth, pinned host<->device copy bandwidth, and the
// device buffers and stream waits the collective sweep needs. Plain C++ header (no CUDA types), so run/ can call
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

struct AttentionSeconds {
  double forward = 0.0;   // attention_forward
  double backward = 0.0;  // attention_backward (dQ with D = rowsum(dO * O), then dK and dV)
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
  // Median seconds of the executor's bf16 attention forward and backward at `shape` (the flash kernels at head
  // sizes 64 and 128, the plain kernel otherwise), on random q, k, v and output gradient.
  AttentionSeconds attention_seconds(const AttentionShape& shape, int repeats);
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
