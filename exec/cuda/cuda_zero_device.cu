#include "exec/cuda/cuda_zero_device.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <new>
#include <stdexcept>
#include <string>

#include "exec/activation_accounting.h"
#include "exec/cuda/adamw.cuh"
#include "exec/cuda/cuda_check.h"
#include "exec/cuda/cuda_common.cuh"

namespace zeroplan::exec {

namespace {

using i64 = std::int64_t;

// dst += src (accumulate) or dst = src (convert), the sum in fp32 and rounded once to D.
template <typename D, typename S, bool kAdd>
__global__ void combine_kernel(D* dst, const S* src, i64 n) {
  const i64 i = static_cast<i64>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) dst[i] = cuda::from_f<D>(kAdd ? cuda::to_f(dst[i]) + cuda::to_f(src[i]) : cuda::to_f(src[i]));
}

template <typename F>
void by_type(CommDtype type, F&& f) {
  switch (type) {
    case CommDtype::f32: f(float{}); return;
    case CommDtype::f16: f(__half{}); return;
    case CommDtype::bf16: f(__nv_bfloat16{}); return;
    default: throw std::invalid_argument("CUDA ZeRO device: unsupported element type");
  }
}

// dst = src converted, eight elements a thread (n a multiple of 8, both pointers aligned for the 16-byte accesses
// of eight elements).
template <typename D, typename S>
__global__ void convert8_kernel(D* dst, const S* src, i64 n) {
  const i64 i = (static_cast<i64>(blockIdx.x) * blockDim.x + threadIdx.x) * 8;
  if (i >= n) return;
  float x[8];
  cuda::load8(src + i, x);
  cuda::store8(dst + i, x);
}

// combine_kernel over n elements of any pair of element types.
template <bool kAdd>
void combine(void* dst, CommDtype dst_type, const void* src, CommDtype src_type, i64 n, cudaStream_t stream) {
  if (n <= 0) return;
  by_type(dst_type, [&](auto d) {
    by_type(src_type, [&](auto s) {
      using D = decltype(d);
      using S = decltype(s);
      combine_kernel<D, S, kAdd><<<cuda::ceil_div(n, 256), 256, 0, stream>>>(static_cast<D*>(dst),
                                                                            static_cast<const S*>(src), n);
      CUDA_CHECK_LAUNCH();
    });
  });
}

float host_value(const unsigned char* p, CommDtype type) {
  switch (type) {
    case CommDtype::f32: { float x; std::memcpy(&x, p, 4); return x; }
    case CommDtype::bf16: {
      std::uint16_t b; std::memcpy(&b, p, 2);
      const std::uint32_t f = static_cast<std::uint32_t>(b) << 16;
      float x; std::memcpy(&x, &f, 4); return x;
    }
    case CommDtype::f16: { __half h; std::memcpy(&h, p, 2); return __half2float(h); }
    default: return 0.0f;
  }
}

}  // namespace

CudaZeroDevice::CudaZeroDevice(const ParamLayout& layout, std::uint64_t seed, CommDtype element,
                               DeviceAllocator& alloc, cudaStream_t compute, cudaStream_t comm)
    : layout_(layout), seed_(seed), element_(element), alloc_(alloc), compute_(compute), comm_(comm) {
  norm_slots_ = alloc_.allocate_n<float>("workspace", "gradient-norm slots", kNormSlots);
  norm_partials_ = alloc_.allocate_n<float>("workspace", "gradient-norm partials", kNormPartials + 1);
  CUDA_CHECK(cudaMallocHost(&host_norms_, kNormSlots * sizeof(float)));
  for (cudaEvent_t& e : order_) CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  CUDA_CHECK(cudaStreamCreateWithFlags(&to_host_, cudaStreamNonBlocking));
  CUDA_CHECK(cudaStreamCreateWithFlags(&to_device_, cudaStreamNonBlocking));
}

cudaStream_t CudaZeroDevice::stream(Lane lane) const {
  switch (lane) {
    case Lane::compute: return compute_;
    case Lane::comm: return comm_;
    case Lane::to_host: return to_host_;
    case Lane::to_device: return to_device_;
  }
  return compute_;
}

CudaZeroDevice::~CudaZeroDevice() {
  cudaStreamSynchronize(compute_);
  cudaStreamSynchronize(comm_);
  if (to_host_) cudaStreamSynchronize(to_host_);
  if (to_device_) cudaStreamSynchronize(to_device_);
  for (const HostBlock& b : host_blocks_) b.pinned ? static_cast<void>(cudaFreeHost(b.p)) : std::free(b.p);
  if (to_host_) cudaStreamDestroy(to_host_);
  if (to_device_) cudaStreamDestroy(to_device_);
  for (cudaEvent_t e : order_)
    if (e) cudaEventDestroy(e);
  for (cudaEvent_t e : named_)
    if (e) cudaEventDestroy(e);
  for (cudaEvent_t e : captured_named_) cudaEventDestroy(e);
  for (cudaEvent_t e : marks_) cudaEventDestroy(e);
  if (host_norms_) cudaFreeHost(host_norms_);
}

void* CudaZeroDevice::allocate(const char* component, const char* what, std::int64_t elements, CommDtype type) {
  return alloc_.allocate(component, what, std::max<std::int64_t>(1, elements) * comm_dtype_bytes(type));
}

void CudaZeroDevice::record_external(const char* component, const char* what, void* ptr, std::int64_t bytes) {
  alloc_.record_external(component, what, ptr, bytes);
}

void* CudaZeroDevice::allocate_host(const char* component, const char* what, std::int64_t bytes, bool pinned) {
  if (bytes < 0) throw std::invalid_argument(std::string("host allocation of negative size for ") + what);
  const std::size_t size = static_cast<std::size_t>((std::max<std::int64_t>(1, bytes) + 63) / 64 * 64);
  void* p = nullptr;
  if (pinned) {
    // Page-aligned; portable: usable from every device's streams.
    const cudaError_t e = cudaHostAlloc(&p, size, cudaHostAllocPortable);
    if (e != cudaSuccess)
      throw std::runtime_error(std::string("cudaHostAlloc of ") + std::to_string(size) + " bytes (" + what +
                               ") failed: " + cudaGetErrorString(e) + " at " + __FILE__ + ":" +
                               std::to_string(__LINE__));
  } else {
    p = std::aligned_alloc(64, size);
    if (!p) throw std::bad_alloc();
  }
  host_blocks_.push_back(HostBlock{p, pinned});
  std::memset(p, 0, size);
  auto it = std::find_if(host_bytes_.begin(), host_bytes_.end(), [&](const auto& e) { return e.first == component; });
  if (it == host_bytes_.end()) host_bytes_.emplace_back(component, 0), it = host_bytes_.end() - 1;
  it->second += bytes;
  return p;
}

void CudaZeroDevice::copy_to_host(void* host, const void* device, std::int64_t bytes) {
  if (replayed()) return;
  CUDA_CHECK(cudaMemcpyAsync(host, device, static_cast<std::size_t>(bytes), cudaMemcpyDeviceToHost, to_host_));
}

void CudaZeroDevice::copy_to_device(void* device, const void* host, std::int64_t bytes) {
  if (replayed()) return;
  CUDA_CHECK(cudaMemcpyAsync(device, host, static_cast<std::size_t>(bytes), cudaMemcpyHostToDevice, to_device_));
}

void CudaZeroDevice::host_wait_event(int id) {
  require_eager("host_wait_event");
  CUDA_CHECK(cudaEventSynchronize(named_event(id)));
}

bool CudaZeroDevice::event_passed(int id) {
  require_eager("event_passed");
  const cudaError_t status = cudaEventQuery(named_event(id));
  if (status == cudaErrorNotReady) {
    (void)cudaGetLastError();  // "not ready" is an answer, not a failure: leave no error behind for a later check
    return false;
  }
  CUDA_CHECK(status);
  return true;
}

void CudaZeroDevice::init_host_master(float* master, std::int64_t flat_begin, std::int64_t n) {
  // The initialization kernel fills a device piece, copied to the host: 2^24 floats (64 MiB) of device memory
  // for the duration of the call.
  const std::int64_t piece = std::min<std::int64_t>(n, std::int64_t{1} << 24);
  if (piece <= 0) return;
  float* tmp = alloc_.allocate_n<float>("transfer", "master initialization", piece);
  for (std::int64_t done = 0; done < n; done += piece) {
    const std::int64_t k = std::min(piece, n - done);
    init_params(nullptr, tmp, flat_begin + done, k);
    CUDA_CHECK(cudaMemcpyAsync(master + done, tmp, k * sizeof(float), cudaMemcpyDeviceToHost, compute_));
    CUDA_CHECK(cudaStreamSynchronize(compute_));
  }
  alloc_.free(tmp);
}

void CudaZeroDevice::init_params(void* params, float* master, std::int64_t flat_begin, std::int64_t n) {
  const std::int64_t flat_end = flat_begin + n;
  const int e = comm_dtype_bytes(element_);
  // gaps between tensors (alignment) are zero
  if (params) CUDA_CHECK(cudaMemsetAsync(params, 0, n * e, compute_));
  if (master) CUDA_CHECK(cudaMemsetAsync(master, 0, n * sizeof(float), compute_));
  for (const ParamTensor& t : layout_.tensors()) {
    const std::int64_t lo = std::max(flat_begin, t.offset), hi = std::min(flat_end, t.offset + t.numel());
    if (lo >= hi) continue;
    const std::int64_t live_rows = layout_.live_elements(t);
    const std::int64_t skip = lo - t.offset;  // elements of the tensor before the range
    by_type(element_, [&](auto zero) {
      using T = decltype(zero);
      T* p = params ? static_cast<T*>(params) + (lo - flat_begin) : nullptr;
      float* m = master ? master + (lo - flat_begin) : nullptr;
      cuda::init_tensor<T>(p, m, hi - lo, t.init_index + skip, live_rows - skip, t.init, seed_, t.init_std, compute_);
    });
  }
}

void CudaZeroDevice::zero(void* p, std::int64_t elements, CommDtype type, Lane lane) {
  if (replayed()) return;
  CUDA_CHECK(cudaMemsetAsync(p, 0, elements * comm_dtype_bytes(type), stream(lane)));
}

void CudaZeroDevice::accumulate(void* dst, CommDtype dst_type, const void* src, CommDtype src_type, std::int64_t n,
                                Lane lane) {
  if (replayed()) return;
  combine<true>(dst, dst_type, src, src_type, n, stream(lane));
}

void CudaZeroDevice::convert(void* dst, CommDtype dst_type, const void* src, CommDtype src_type, std::int64_t n,
                             Lane lane) {
  if (replayed()) return;
  if (n > 0 && dst_type == src_type) {
    CUDA_CHECK(cudaMemcpyAsync(dst, src, n * comm_dtype_bytes(dst_type), cudaMemcpyDeviceToDevice, stream(lane)));
    return;
  }
  const auto aligned = [](const void* p, CommDtype t) {
    return reinterpret_cast<std::uintptr_t>(p) % (8 * static_cast<std::uintptr_t>(comm_dtype_bytes(t))) == 0;
  };
  if (n > 0 && n % 8 == 0 && aligned(dst, dst_type) && aligned(src, src_type)) {
    // A thread per eight elements over the whole GPU. Stage 3's casts before each all-gather run on the
    // communication lane beside the compute lane's kernels; capped at 32 or 8 blocks they took longer and held
    // the GEMMs back longer: Llama-2 7B at stage 3 on 2x H200, 345.4 ms a step against 357.6 (32) and 454.6 (8),
    // 338.6 keeping a 16-bit partition (bench/llama/results/2026-11-30-h200x2/call4).
    const int blocks = static_cast<int>(cuda::ceil_div(n / 8, 256));
    by_type(dst_type, [&](auto d) {
      by_type(src_type, [&](auto s) {
        using D = decltype(d);
        using S = decltype(s);
        convert8_kernel<D, S><<<blocks, 256, 0, stream(lane)>>>(static_cast<D*>(dst), static_cast<const S*>(src), n);
        CUDA_CHECK_LAUNCH();
      });
    });
    return;
  }
  combine<false>(dst, dst_type, src, src_type, n, stream(lane));
}

void CudaZeroDevice::sum_squares(const void* g, CommDtype type, std::int64_t n, int slot) {
  require_eager("sum_squares");
  if (slot < 0 || slot >= kNormSlots) throw std::out_of_range("sum_squares: slot " + std::to_string(slot));
  by_type(type, [&](auto zero) {
    using T = decltype(zero);
    cuda::grad_norm_squared<T>(norm_slots_ + slot, norm_partials_, static_cast<const T*>(g), n, compute_);
  });
}

void CudaZeroDevice::read_sum_squares(double* out, int count) {
  require_eager("read_sum_squares");
  CUDA_CHECK(cudaMemcpyAsync(host_norms_, norm_slots_, count * sizeof(float), cudaMemcpyDeviceToHost, compute_));
  CUDA_CHECK(cudaStreamSynchronize(compute_));  // the norm decides clipping and overflow on the host
  for (int i = 0; i < count; ++i) out[i] = host_norms_[i];
}

void CudaZeroDevice::adamw(const AdamwRange& r, float lr, float beta1, float beta2, float eps, float weight_decay,
                           float grad_scale, int step) {
  require_eager("adamw");
  const cuda::DecayGeometry decay{layout_.blocks_begin(), layout_.block_stride(), layout_.block_decay_elements(),
                                  layout_.blocks_end(), layout_.tail_decay_end(), r.flat_base};
  by_type(element_, [&](auto zero) {
    using T = decltype(zero);
    if (r.fp32_grads)
      cuda::adamw_update<T, float>(static_cast<T*>(r.params), r.master, static_cast<const float*>(r.grads), r.m, r.v,
                                   r.n, lr, beta1, beta2, eps, weight_decay, grad_scale, step, decay, compute_);
    else
      cuda::adamw_update<T, T>(static_cast<T*>(r.params), r.master, static_cast<const T*>(r.grads), r.m, r.v, r.n,
                               lr, beta1, beta2, eps, weight_decay, grad_scale, step, decay, compute_);
  });
}

void CudaZeroDevice::upload_params(void* params, float* master, const float* values, std::int64_t n) {
  require_eager("upload_params");
  float* tmp = alloc_.allocate_n<float>("transfer", "parameter upload", n);
  CUDA_CHECK(cudaMemcpyAsync(tmp, values, n * sizeof(float), cudaMemcpyHostToDevice, compute_));
  by_type(element_, [&](auto zero) {
    using T = decltype(zero);
    cuda::set_from_fp32<T>(static_cast<T*>(params), master, tmp, n, compute_);
  });
  CUDA_CHECK(cudaStreamSynchronize(compute_));
  alloc_.free(tmp);
}

void CudaZeroDevice::download(const void* src, float* dst, std::int64_t n, CommDtype type, double factor) {
  require_eager("download");
  const int e = comm_dtype_bytes(type);
  std::vector<unsigned char> raw(static_cast<std::size_t>(n * e));
  synchronize();
  CUDA_CHECK(cudaMemcpy(raw.data(), src, n * e, cudaMemcpyDeviceToHost));
  for (std::int64_t i = 0; i < n; ++i) dst[i] = static_cast<float>(host_value(raw.data() + i * e, type) * factor);
}

void CudaZeroDevice::lane_waits_for(Lane waiter, Lane producer) {
  if (waiter == producer || replayed()) return;
  if (graph_mode_ == GraphMode::capturing) {
    // A lane outside the capture has nothing in the graph to wait for (its earlier work precedes the capture); a
    // lane that waits for one inside joins it.
    if (!lane_captured_[static_cast<int>(producer)]) return;
    lane_captured_[static_cast<int>(waiter)] = true;
  }
  cudaEvent_t e = order_[static_cast<int>(producer)];
  CUDA_CHECK(cudaEventRecord(e, stream(producer)));
  CUDA_CHECK(cudaStreamWaitEvent(stream(waiter), e, 0));
}

cudaEvent_t CudaZeroDevice::named_event(int id) {
  if (id < 0) throw std::out_of_range("named event " + std::to_string(id));
  while (static_cast<int>(named_.size()) <= id) {
    cudaEvent_t e;
    CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    named_.push_back(e);
  }
  return named_[id];
}

cudaEvent_t CudaZeroDevice::captured_event(int id) {
  while (static_cast<int>(captured_named_.size()) <= id) {
    cudaEvent_t e;
    CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    captured_named_.push_back(e);
  }
  return captured_named_[static_cast<std::size_t>(id)];
}

void CudaZeroDevice::record_event(int id, Lane lane) {
  if (replayed()) return;
  if (graph_mode_ == GraphMode::capturing) {
    if (!lane_captured_[static_cast<int>(lane)])
      throw std::logic_error("CUDA graph capture: event " + std::to_string(id) + " recorded on a lane outside it");
    if (static_cast<int>(event_captured_.size()) <= id) event_captured_.resize(static_cast<std::size_t>(id) + 1);
    event_captured_[static_cast<std::size_t>(id)] = true;
    CUDA_CHECK(cudaEventRecord(captured_event(id), stream(lane)));
    return;
  }
  CUDA_CHECK(cudaEventRecord(named_event(id), stream(lane)));
}
void CudaZeroDevice::wait_event(int id, Lane waiter) {
  if (replayed()) return;
  if (graph_mode_ == GraphMode::capturing) {
    // Recorded before the capture: the caller joined every lane into the compute lane before it began.
    if (id >= static_cast<int>(event_captured_.size()) || !event_captured_[static_cast<std::size_t>(id)]) return;
    lane_captured_[static_cast<int>(waiter)] = true;
    CUDA_CHECK(cudaStreamWaitEvent(stream(waiter), captured_event(id), 0));
    return;
  }
  CUDA_CHECK(cudaStreamWaitEvent(stream(waiter), named_event(id), 0));
}

int CudaZeroDevice::mark(Lane lane) {
  if (replayed()) {
    // The replayed graph records the mark its capture made at this index.
    if (marks_used_ >= static_cast<int>(marks_.size()))
      throw std::logic_error("CUDA graph replay: time mark " + std::to_string(marks_used_) + " was never captured");
    return marks_used_++;
  }
  if (graph_mode_ == GraphMode::capturing && !lane_captured_[static_cast<int>(lane)])
    throw std::logic_error("CUDA graph capture: time mark on a lane outside it");
  if (marks_used_ == static_cast<int>(marks_.size())) {
    cudaEvent_t e;
    CUDA_CHECK(cudaEventCreate(&e));
    marks_.push_back(e);
  }
  // An external record node in a capture: every replay records the mark (a plain record would only order the graph).
  CUDA_CHECK(cudaEventRecordWithFlags(marks_[marks_used_], stream(lane),
                                      graph_mode_ == GraphMode::capturing ? cudaEventRecordExternal
                                                                          : cudaEventRecordDefault));
  return marks_used_++;
}

double CudaZeroDevice::seconds_between(int a, int b) {
  float ms = 0;
  CUDA_CHECK(cudaEventElapsedTime(&ms, marks_.at(a), marks_.at(b)));
  return ms * 1e-3;
}

void CudaZeroDevice::set_graph_mode(GraphMode mode) {
  graph_mode_ = mode;
  event_captured_.clear();
  for (bool& c : lane_captured_) c = false;
  lane_captured_[static_cast<int>(Lane::compute)] = mode == GraphMode::capturing;  // the stream being captured
}

void CudaZeroDevice::require_eager(const char* what) const {
  if (graph_mode_ != GraphMode::eager)
    throw std::logic_error(std::string("CudaZeroDevice::") + what + " cannot be part of a CUDA graph's micro-step");
}

void CudaZeroDevice::synchronize() {
  require_eager("synchronize");
  for (Lane lane : {Lane::compute, Lane::comm, Lane::to_host, Lane::to_device})
    CUDA_CHECK(cudaStreamSynchronize(stream(lane)));
}

}  // namespace zeroplan::exec
