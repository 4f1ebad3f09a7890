#include "exec/comm/nccl_communicator.h"

#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <vector>

#include <cuda_runtime.h>
#include <nccl.h>

#include "exec/cuda/cuda_check.h"

namespace zeroplan::exec {

namespace {

void nccl_check(ncclResult_t result, const char* call, const char* file, int line) {
  if (result == ncclSuccess) return;
  throw std::runtime_error(std::string("NCCL error ") + ncclGetErrorString(result) + " in " + call + " at " + file +
                           ":" + std::to_string(line));
}
#define NCCL_CHECK(call) nccl_check((call), #call, __FILE__, __LINE__)

ncclDataType_t nccl_type(CommDtype type) {
  switch (type) {
    case CommDtype::f32: return ncclFloat32;
    case CommDtype::f16: return ncclFloat16;
    case CommDtype::bf16: return ncclBfloat16;
    case CommDtype::f64: return ncclFloat64;
  }
  return ncclFloat32;
}

std::string to_hex(const ncclUniqueId& id) {
  static const char* digits = "0123456789abcdef";
  std::string out;
  for (std::size_t i = 0; i < sizeof id.internal; ++i) {
    const auto b = static_cast<unsigned char>(id.internal[i]);
    out += digits[b >> 4];
    out += digits[b & 15];
  }
  return out;
}

ncclUniqueId from_hex(const std::string& hex) {
  ncclUniqueId id{};
  if (hex.size() != 2 * sizeof id.internal)
    throw std::invalid_argument("NCCL unique id: expected " + std::to_string(2 * sizeof id.internal) +
                                " hex characters, got " + std::to_string(hex.size()));
  auto nibble = [&](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    throw std::invalid_argument("NCCL unique id: not a hex digit: " + std::string(1, c));
  };
  for (std::size_t i = 0; i < sizeof id.internal; ++i)
    id.internal[i] = static_cast<char>(nibble(hex[2 * i]) * 16 + nibble(hex[2 * i + 1]));
  return id;
}

class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(int rank, int world, int device, const ncclUniqueId& id) : rank_(rank), world_(world) {
    CUDA_CHECK(cudaSetDevice(device));
    CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    try {
      NCCL_CHECK(ncclCommInitRank(&comm_, world, id, rank));
      CUDA_CHECK(cudaMalloc(&scalars_, kMaxScalars * sizeof(double)));
    } catch (...) {
      release();
      throw;
    }
  }
  ~NcclCommunicator() override { release(); }

  int rank() const override { return rank_; }
  int world() const override { return world_; }
  std::string backend() const override { return "nccl"; }

  void all_reduce_sum(const void* send, void* recv, std::int64_t count, CommDtype type) override {
    NCCL_CHECK(ncclAllReduce(send, recv, static_cast<std::size_t>(count), nccl_type(type), ncclSum, comm_, stream_));
    count_bytes(CommKind::all_reduce, count * comm_dtype_bytes(type));
  }
  void reduce_scatter_sum(const void* send, void* recv, std::int64_t recv_count, CommDtype type) override {
    NCCL_CHECK(ncclReduceScatter(send, recv, static_cast<std::size_t>(recv_count), nccl_type(type), ncclSum, comm_,
                                 stream_));
    count_bytes(CommKind::reduce_scatter, recv_count * world_ * comm_dtype_bytes(type));
  }
  void all_gather(const void* send, void* recv, std::int64_t send_count, CommDtype type) override {
    NCCL_CHECK(ncclAllGather(send, recv, static_cast<std::size_t>(send_count), nccl_type(type), comm_, stream_));
    count_bytes(CommKind::all_gather, send_count * world_ * comm_dtype_bytes(type));
  }
  void group_start() override { NCCL_CHECK(ncclGroupStart()); }
  void group_end() override { NCCL_CHECK(ncclGroupEnd()); }

  void all_reduce_host(double* values, int count) override {
    if (count > kMaxScalars) throw std::invalid_argument("all_reduce_host: at most 64 values");
    CUDA_CHECK(cudaMemcpyAsync(scalars_, values, count * sizeof(double), cudaMemcpyHostToDevice, stream_));
    NCCL_CHECK(ncclAllReduce(scalars_, scalars_, static_cast<std::size_t>(count), ncclFloat64, ncclSum, comm_, stream_));
    CUDA_CHECK(cudaMemcpyAsync(values, scalars_, count * sizeof(double), cudaMemcpyDeviceToHost, stream_));
    CUDA_CHECK(cudaStreamSynchronize(stream_));
    if (world_ > 1) {
      counters_.control_calls += 1;
      counters_.control_bytes += 8 * static_cast<std::int64_t>(count);
    }
  }
  void barrier() override {
    double zero = 0;
    all_reduce_host(&zero, 1);
  }
  void* comm_stream() const override { return stream_; }

 private:
  static constexpr int kMaxScalars = 64;
  void count_bytes(CommKind kind, std::int64_t bytes) {
    if (world_ > 1) counters_.add(kind, bytes);
  }
  void release() {
    if (stream_) cudaStreamSynchronize(stream_);
    if (comm_) ncclCommDestroy(comm_);
    if (scalars_) cudaFree(scalars_);
    if (stream_) cudaStreamDestroy(stream_);
    comm_ = nullptr;
    scalars_ = nullptr;
    stream_ = nullptr;
  }
  int rank_, world_;
  cudaStream_t stream_ = nullptr;
  ncclComm_t comm_ = nullptr;
  double* scalars_ = nullptr;
};

class SingleGpuCommunicator final : public Communicator {
 public:
  SingleGpuCommunicator() { CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking)); }
  ~SingleGpuCommunicator() override {
    cudaStreamSynchronize(stream_);
    cudaStreamDestroy(stream_);
  }
  int rank() const override { return 0; }
  int world() const override { return 1; }
  std::string backend() const override { return "local"; }
  void all_reduce_sum(const void* send, void* recv, std::int64_t count, CommDtype type) override {
    copy(send, recv, count * comm_dtype_bytes(type));
  }
  void reduce_scatter_sum(const void* send, void* recv, std::int64_t recv_count, CommDtype type) override {
    copy(send, recv, recv_count * comm_dtype_bytes(type));
  }
  void all_gather(const void* send, void* recv, std::int64_t send_count, CommDtype type) override {
    copy(send, recv, send_count * comm_dtype_bytes(type));
  }
  void group_start() override {}
  void group_end() override {}
  void all_reduce_host(double*, int) override {}
  void barrier() override {}
  void* comm_stream() const override { return stream_; }

 private:
  void copy(const void* send, void* recv, std::int64_t bytes) {
    if (send != recv && bytes > 0)
      CUDA_CHECK(cudaMemcpyAsync(recv, send, static_cast<std::size_t>(bytes), cudaMemcpyDeviceToDevice, stream_));
  }
  cudaStream_t stream_ = nullptr;
};

}  // namespace

std::unique_ptr<Communicator> make_single_gpu_communicator() { return std::make_unique<SingleGpuCommunicator>(); }

std::string make_nccl_unique_id_hex() {
  ncclUniqueId id;
  NCCL_CHECK(ncclGetUniqueId(&id));
  return to_hex(id);
}

std::unique_ptr<Communicator> make_nccl_communicator(int rank, int world, int device, const std::string& id_hex,
                                                     Communicator* mpi) {
  ncclUniqueId id{};
  if (!id_hex.empty()) {
    id = from_hex(id_hex);
  } else {
    if (!mpi) throw std::invalid_argument("NCCL: no unique id given and no MPI to broadcast one");
    // rank 0 makes the id; every rank receives it through an MPI sum (the others contribute zeros).
    std::vector<double> words(sizeof id.internal, 0.0);
    if (mpi->rank() == 0) {
      NCCL_CHECK(ncclGetUniqueId(&id));
      for (std::size_t i = 0; i < sizeof id.internal; ++i) words[i] = static_cast<unsigned char>(id.internal[i]);
    }
    for (std::size_t at = 0; at < words.size(); at += 64)
      mpi->all_reduce_host(words.data() + at, static_cast<int>(std::min<std::size_t>(64, words.size() - at)));
    for (std::size_t i = 0; i < sizeof id.internal; ++i) id.internal[i] = static_cast<char>(static_cast<int>(words[i]));
  }
  return std::make_unique<NcclCommunicator>(rank, world, device, id);
}

}  // namespace zeroplan::exec
