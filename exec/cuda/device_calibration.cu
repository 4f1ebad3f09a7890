#include "exec/cuda/device_calibration.h"

#include <cuda_bf16.h>
#include <nccl.h>

#include <algorithm>
#include <stdexcept>
#include <vector>

#include "exec/activation_accounting.h"
#include "exec/cuda/attention.cuh"
#include "exec/cuda/cuda_check.h"
#include "exec/cuda/cudnn_attention.cuh"
#include "exec/cuda/matmul.cuh"

namespace zeroplan::exec::cuda {

namespace {

// Values in [-1, 1) from a hash of the index (splitmix64's finalizer): GEMM time depends on the data's bits
// (zeros run faster on Hopper's tensor cores), so the operands are random, as in the cluster files' figures.
__global__ void fill_random_bf16(__nv_bfloat16* out, std::int64_t n, std::uint64_t seed) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    std::uint64_t z = seed + 0x9e3779b97f4a7c15ull * static_cast<std::uint64_t>(i + 1);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    out[i] = __float2bfloat16(static_cast<float>(z >> 40) / static_cast<float>(1ull << 23) - 1.0f);
  }
}

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const std::size_t n = values.size();
  return n % 2 ? values[n / 2] : 0.5 * (values[n / 2 - 1] + values[n / 2]);
}

std::int64_t checked_product(std::int64_t a, std::int64_t b) {
  std::int64_t product = 0;
  if (a < 0 || b < 0 || __builtin_mul_overflow(a, b, &product))
    throw std::invalid_argument("calibration buffer of " + std::to_string(a) + " x " + std::to_string(b) +
                                " overflows 64-bit bytes");
  return product;
}

}  // namespace

struct DeviceCalibrator::State {
  int device = 0;
  cudaStream_t stream = nullptr;
  cudaEvent_t start = nullptr, stop = nullptr;
  void* workspace = nullptr;
  std::unique_ptr<Matmul> matmul;
  // cuDNN's fused attention on this stream, made on the first shape offered to it; its plans are kept per shape.
  // Its workspace is allocated by each attention_seconds call and freed at its end.
  std::unique_ptr<CudnnAttention> cudnn_attention;

  ~State() {
    // Destruction must not throw: errors here are left unreported (the figures are already taken).
    cudnn_attention.reset();  // its handle is bound to the stream
    matmul.reset();
    if (workspace) cudaFree(workspace);
    if (start) cudaEventDestroy(start);
    if (stop) cudaEventDestroy(stop);
    if (stream) cudaStreamDestroy(stream);
  }

  // Median seconds of `work` queued on the stream, after one untimed call (cuBLASLt's algorithm choice, lazy
  // module loading).
  template <typename Work>
  double time(Work&& work, int repeats) {
    work();
    CUDA_CHECK(cudaStreamSynchronize(stream));
    std::vector<double> seconds;
    for (int r = 0; r < std::max(1, repeats); ++r) {
      CUDA_CHECK(cudaEventRecord(start, stream));
      work();
      CUDA_CHECK(cudaEventRecord(stop, stream));
      CUDA_CHECK(cudaEventSynchronize(stop));
      float ms = 0.0f;
      CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
      seconds.push_back(1e-3 * ms);
    }
    return median(std::move(seconds));
  }

  // A rows x cols bf16 matrix of random values.
  std::unique_ptr<DeviceBuffer> random_bf16(std::int64_t rows, std::int64_t cols, std::uint64_t seed) {
    const std::int64_t n = checked_product(rows, cols);
    auto buffer = std::make_unique<DeviceBuffer>(checked_product(n, 2));
    fill_random_bf16<<<1024, 256, 0, stream>>>(static_cast<__nv_bfloat16*>(buffer->data()), n, seed);
    CUDA_CHECK_LAUNCH();
    return buffer;
  }
};

DeviceCalibrator::DeviceCalibrator(int device) : state_(std::make_unique<State>()) {
  state_->device = device;
  CUDA_CHECK(cudaSetDevice(device));
  CUDA_CHECK(cudaFree(0));  // the primary context exists from here on
  std::size_t free = 0, total = 0;
  CUDA_CHECK(cudaMemGetInfo(&free, &total));
  cudaDeviceProp props{};
  CUDA_CHECK(cudaGetDeviceProperties(&props, device));
  facts_.name = props.name;
  facts_.multiprocessors = props.multiProcessorCount;
  facts_.total_bytes = static_cast<std::int64_t>(total);
  facts_.context_bytes = static_cast<std::int64_t>(total - free);
  CUDA_CHECK(cudaStreamCreateWithFlags(&state_->stream, cudaStreamNonBlocking));
  CUDA_CHECK(cudaEventCreate(&state_->start));
  CUDA_CHECK(cudaEventCreate(&state_->stop));
  // The executor's workspace size (exec/activation_accounting.h), so the GEMMs choose among the same algorithms.
  CUDA_CHECK(cudaMalloc(&state_->workspace, static_cast<std::size_t>(kCublasWorkspaceBytes)));
  state_->matmul = std::make_unique<Matmul>(state_->workspace, static_cast<std::size_t>(kCublasWorkspaceBytes));
}

DeviceCalibrator::~DeviceCalibrator() = default;

double DeviceCalibrator::gemm_seconds(const GemmShape& s, bool training_pass, int repeats) {
  if (s.m < 1 || s.k < 1 || s.n < 1) throw std::invalid_argument("gemm_seconds: every dimension must be >= 1");
  State& st = *state_;
  using bf16 = __nv_bfloat16;
  const auto inp = st.random_bf16(s.m, s.k, 1), w = st.random_bf16(s.n, s.k, 2), out = st.random_bf16(s.m, s.n, 3);
  // The training pass's gradients; `out` stands for the output gradient (the same shape, random values).
  const auto dinp = training_pass ? st.random_bf16(s.m, s.k, 4) : nullptr;
  const auto dw = training_pass ? st.random_bf16(s.n, s.k, 5) : nullptr;
  const auto* x = static_cast<const bf16*>(inp->data());
  const auto* weight = static_cast<const bf16*>(w->data());
  auto* y = static_cast<bf16*>(out->data());
  const double seconds = st.time(
      [&] {
        st.matmul->forward(y, x, weight, static_cast<const bf16*>(nullptr), static_cast<const bf16*>(nullptr), s.m,
                           s.k, s.n, st.stream);
        if (training_pass) {
          st.matmul->backward_input(static_cast<bf16*>(dinp->data()), y, weight, s.m, s.k, s.n, st.stream);
          st.matmul->backward_weight(static_cast<bf16*>(dw->data()), y, x, s.m, s.k, s.n, /*accumulate=*/false,
                                     st.stream);
        }
      },
      repeats);
  return seconds;
}

namespace {

// Why the CUDA trainer would not offer a bf16 attention of this shape to cuDNN (the conditions of
// exec/activation_accounting.h cudnn_attention_offered; calibrate times the default run, not --deterministic).
std::string not_offered_reason(int seq, int head_size) {
  std::string why;
  const auto add = [&](const std::string& part) { why += (why.empty() ? "" : ", ") + part; };
  if (seq % 128 != 0) add("T = " + std::to_string(seq) + " is not a multiple of 128");
  if (head_size % 8 != 0 || head_size > 256)
    add("head size " + std::to_string(head_size) + " is not a multiple of 8 up to 256");
  return why.empty() ? std::string("not offered to cuDNN") : "not offered to cuDNN: " + why;
}

}  // namespace

AttentionSeconds DeviceCalibrator::attention_seconds(const AttentionShape& a, int repeats, AttentionKernels kernels) {
  const int kv = a.kv_heads > 0 ? a.kv_heads : a.heads;
  if (a.batch < 1 || a.seq < 1 || a.heads < 1 || a.hidden < a.heads || a.hidden % a.heads != 0 || a.heads % kv != 0)
    throw std::invalid_argument("attention_seconds: batch, seq and heads must be >= 1, hidden a multiple of heads and "
                                "heads a multiple of kv_heads");
  State& st = *state_;
  using bf16 = __nv_bfloat16;
  const int head_size = a.hidden / a.heads;
  const std::int64_t tokens = checked_product(a.batch, a.seq);
  const std::int64_t rows = checked_product(tokens, a.heads);
  const std::int64_t qkv_cols = static_cast<std::int64_t>(a.heads + 2 * kv) * head_size;  // q, then k and v heads
  const auto qkv = st.random_bf16(tokens, qkv_cols, 6), dout = st.random_bf16(tokens, a.hidden, 7);
  const auto out = st.random_bf16(tokens, a.hidden, 8), dqkv = st.random_bf16(tokens, qkv_cols, 9);
  DeviceBuffer lse(checked_product(rows, 4));
  auto* o = static_cast<bf16*>(out->data());
  const auto* q = static_cast<const bf16*>(qkv->data());
  auto* l = static_cast<float*>(lse.data());
  auto* dq = static_cast<bf16*>(dqkv->data());
  const auto* dy = static_cast<const bf16*>(dout->data());
  AttentionSeconds s;

  // The trainer's choice at this shape (exec/cuda/cuda_trainer.cu choose_attention): cuDNN's where the run's
  // configuration offers it (the same test as the trainer's, on a configuration of this shape) and cuDNN plans it.
  ExecConfig config;
  config.micro_batch = a.batch;
  config.seq_len = a.seq;
  config.precision = ExecPrecision::bf16;
  config.shape.heads = a.heads;
  config.shape.kv_heads = kv;
  config.shape.head_size = head_size;
  const CudnnAttentionShape shape{a.batch, a.seq, a.heads, kv, head_size, ExecPrecision::bf16};
  if (kernels == AttentionKernels::executor) {
    s.cudnn_note = "the executor's kernels were asked for";
  } else if (!cudnn_attention_offered(config)) {
    s.cudnn_note = not_offered_reason(a.seq, head_size);
  } else {
    if (!st.cudnn_attention) st.cudnn_attention = std::make_unique<CudnnAttention>(st.stream, /*deterministic=*/false);
    std::string why;
    if (st.cudnn_attention->supported(shape, &why)) {
      s.cudnn = true;
    } else {
      s.cudnn_note = "cuDNN refused: " + why;
    }
  }

  if (s.cudnn) {
    CudnnAttention& cudnn = *st.cudnn_attention;
    const std::int64_t workspace_bytes = CudnnAttention::workspace_bytes(shape, /*deterministic=*/false);
    DeviceBuffer workspace(workspace_bytes);  // cudaMalloc: 256-byte aligned
    // The workspace lives for this call only: the attention object must not keep its address past it.
    struct Unset {
      CudnnAttention& a;
      ~Unset() { a.set_workspace(nullptr, 0); }
    } unset{cudnn};
    cudnn.set_workspace(workspace.data(), workspace_bytes);
    const CudnnAttention::PlanInfo info = cudnn.plan_info(shape);
    s.kernel = "cuDNN fused attention (engines " + std::to_string(info.forward_engine) + " forward, " +
               std::to_string(info.backward_engine) + " backward; exec/cuda/cudnn_attention.cu)";
    s.forward = st.time([&] { cudnn.forward(shape, o, l, q); }, repeats);
    // The backward reads the forward's output and logsumexp as training does (the last forward above wrote them).
    s.backward = st.time([&] { cudnn.backward(shape, dq, dy, q, o, l); }, repeats);
    CUDA_CHECK(cudaStreamSynchronize(st.stream));  // done with the workspace before it is freed
    return s;
  }

  DeviceBuffer d_rowsum(checked_product(rows, 4));
  s.kernel = "the executor's kernels (exec/cuda/attention.cu)";
  s.forward = st.time([&] { attention_forward<bf16>(o, l, q, a.batch, a.seq, a.heads, kv, head_size, st.stream); },
                      repeats);
  // The backward reads the forward's output and logsumexp as training does (the last forward above wrote them).
  s.backward = st.time(
      [&] {
        attention_backward<bf16>(dq, static_cast<float*>(d_rowsum.data()), dy, q, o, l, a.batch, a.seq, a.heads, kv,
                                 head_size, st.stream);
      },
      repeats);
  return s;
}

double DeviceCalibrator::device_copy_bandwidth(std::int64_t bytes, int repeats) {
  if (bytes < 1) throw std::invalid_argument("device_copy_bandwidth: bytes must be >= 1");
  State& st = *state_;
  DeviceBuffer src(bytes), dst(bytes);
  CUDA_CHECK(cudaMemsetAsync(src.data(), 1, static_cast<std::size_t>(bytes), st.stream));
  const double seconds = st.time(
      [&] {
        CUDA_CHECK(cudaMemcpyAsync(dst.data(), src.data(), static_cast<std::size_t>(bytes), cudaMemcpyDeviceToDevice,
                                   st.stream));
      },
      repeats);
  return 2.0 * static_cast<double>(bytes) / seconds;  // each byte read once and written once
}

PinnedCopyRates DeviceCalibrator::pinned_copy_bandwidth(std::int64_t bytes, int repeats) {
  if (bytes < 1) throw std::invalid_argument("pinned_copy_bandwidth: bytes must be >= 1");
  State& st = *state_;
  DeviceBuffer device(bytes);
  void* host = nullptr;
  CUDA_CHECK(cudaHostAlloc(&host, static_cast<std::size_t>(bytes), cudaHostAllocDefault));
  PinnedCopyRates rates;
  try {
    std::fill_n(static_cast<unsigned char*>(host), bytes, static_cast<unsigned char>(1));
    const auto n = static_cast<std::size_t>(bytes);
    const double up = st.time([&] { CUDA_CHECK(cudaMemcpyAsync(device.data(), host, n, cudaMemcpyHostToDevice, st.stream)); },
                              repeats);
    const double down = st.time(
        [&] { CUDA_CHECK(cudaMemcpyAsync(host, device.data(), n, cudaMemcpyDeviceToHost, st.stream)); }, repeats);
    rates.host_to_device = static_cast<double>(bytes) / up;
    rates.device_to_host = static_cast<double>(bytes) / down;
  } catch (...) {
    cudaFreeHost(host);
    throw;
  }
  CUDA_CHECK(cudaFreeHost(host));
  return rates;
}

std::int64_t DeviceCalibrator::free_bytes() const {
  CUDA_CHECK(cudaSetDevice(state_->device));
  return current_device_free_bytes();
}

DeviceBuffer::DeviceBuffer(std::int64_t bytes) {
  if (bytes < 1) throw std::invalid_argument("DeviceBuffer: bytes must be >= 1");
  CUDA_CHECK(cudaMalloc(&data_, static_cast<std::size_t>(bytes)));
}

DeviceBuffer::~DeviceBuffer() {
  if (data_) cudaFree(data_);  // no throw from a destructor; a failure here has no one to report to
}

void use_device(int device) {
  CUDA_CHECK(cudaSetDevice(device));
  CUDA_CHECK(cudaFree(0));
}

std::int64_t current_device_free_bytes() {
  std::size_t free = 0, total = 0;
  CUDA_CHECK(cudaMemGetInfo(&free, &total));
  return static_cast<std::int64_t>(free);
}

void synchronize_stream(void* stream) { CUDA_CHECK(cudaStreamSynchronize(static_cast<cudaStream_t>(stream))); }

std::string nccl_version() {
  int version = 0;
  const ncclResult_t result = ncclGetVersion(&version);
  if (result != ncclSuccess)
    throw std::runtime_error(std::string("ncclGetVersion failed: ") + ncclGetErrorString(result) + " at " + __FILE__ +
                             ":" + std::to_string(__LINE__));
  // NCCL_VERSION_CODE since 2.9: major * 10000 + minor * 100 + patch (nccl.h).
  return std::to_string(version / 10000) + "." + std::to_string(version / 100 % 100) + "." + std::to_string(version % 100);
}

}  // namespace zeroplan::exec::cuda
