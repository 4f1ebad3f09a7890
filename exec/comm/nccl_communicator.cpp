#include "exec/comm/nccl_communicator.h"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <exception>
#include <mutex>
#include <stdexcept>
#include <thread>
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

// An NCCL call on the non-blocking communicator, settled (NcclCommunicator::settle) with its text and file:line.
#define NCCL_SETTLE(call) settle((call), #call, __FILE__, __LINE__)

class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(int rank, int world, int device, const ncclUniqueId& id, const CommWatch& watch, bool windows)
      : rank_(rank), world_(world), device_(device), windows_allowed_(windows) {
    adopt_watch(watch);
    CUDA_CHECK(cudaSetDevice(device));
    CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    try {
      // Non-blocking: every NCCL call returns at once, ncclInProgress while it works (NCCL user guide,
      // "Creating a communication with options"); settle() polls it against the timeout.
      ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
      config.blocking = 0;
      // Zero-CTA policy: an all-gather into a symmetric window (allocate_window) runs on the copy engines and
      // leaves every SM to the compute lane; collectives that reduce, or use unregistered buffers, keep their
      // kernels. Llama-2 7B at stage 3 on 2x H200 (its gathered-parameter arena a window): 325.5 ms a step against
      // 341.5 with the default policy and 334.5 with the window alone, one call
      // (bench/llama/results/2026-11-30-h200x2/call7).
      if (windows_allowed_) config.CTAPolicy = NCCL_CTA_POLICY_ZERO;
      settle(ncclCommInitRankConfig(&comm_, world, id, rank, &config), "ncclCommInitRankConfig", __FILE__, __LINE__);
      CUDA_CHECK(cudaMalloc(&scalars_, kMaxScalars * sizeof(double)));
    } catch (...) {
      release(/*abort=*/true);
      throw;
    }
    watchdog_ = std::make_unique<WatchdogThread>(watchdog_period(watch_.timeout_s), [this] { watch_once(); });
  }
  ~NcclCommunicator() override {
    watchdog_.reset();  // stopped before the communicator goes
    release(/*abort=*/std::uncaught_exceptions() > 0);
  }

  int rank() const override { return rank_; }
  int world() const override { return world_; }
  std::string backend() const override { return "nccl"; }

  void all_reduce_sum(const void* send, void* recv, std::int64_t count, CommDtype type) override {
    const std::int64_t ordinal = progress().count_collective();
    if (graph_mode_ != GraphMode::replayed)
      NCCL_SETTLE(ncclAllReduce(send, recv, static_cast<std::size_t>(count), nccl_type(type), ncclSum, comm_, stream_));
    issued("all_reduce", ordinal);
    count_bytes(CommKind::all_reduce, count * comm_dtype_bytes(type));
  }
  void reduce_scatter_sum(const void* send, void* recv, std::int64_t recv_count, CommDtype type) override {
    const std::int64_t ordinal = progress().count_collective();
    if (graph_mode_ != GraphMode::replayed)
      NCCL_SETTLE(ncclReduceScatter(send, recv, static_cast<std::size_t>(recv_count), nccl_type(type), ncclSum, comm_,
                                    stream_));
    issued("reduce_scatter", ordinal);
    count_bytes(CommKind::reduce_scatter, recv_count * world_ * comm_dtype_bytes(type));
  }
  void all_gather(const void* send, void* recv, std::int64_t send_count, CommDtype type) override {
    const std::int64_t ordinal = progress().count_collective();
    if (graph_mode_ != GraphMode::replayed)
      NCCL_SETTLE(ncclAllGather(send, recv, static_cast<std::size_t>(send_count), nccl_type(type), comm_, stream_));
    issued("all_gather", ordinal);
    count_bytes(CommKind::all_gather, send_count * world_ * comm_dtype_bytes(type));
  }
  void* allocate_window(std::int64_t bytes) override {
    if (world_ < 2 || !windows_allowed_) return nullptr;
    void* p = nullptr;
    settle(ncclMemAlloc(&p, static_cast<std::size_t>(bytes)), "ncclMemAlloc", __FILE__, __LINE__);
    ncclWindow_t win = nullptr;
    try {
      settle(ncclCommWindowRegister(comm_, p, static_cast<std::size_t>(bytes), &win, NCCL_WIN_COLL_SYMMETRIC),
             "ncclCommWindowRegister", __FILE__, __LINE__);
      windows_.emplace_back(p, win);
    } catch (...) {
      ncclMemFree(p);
      throw;
    }
    return p;
  }
  void group_start() override {
    if (graph_mode_ != GraphMode::replayed) NCCL_SETTLE(ncclGroupStart());
    ++group_depth_;
  }
  void group_end() override {
    --group_depth_;
    // Non-blocking communicators launch a group at ncclGroupEnd, which may answer ncclInProgress.
    if (graph_mode_ != GraphMode::replayed) NCCL_SETTLE(ncclGroupEnd());
    if (group_depth_ == 0 && group_first_) {
      record_completion(group_first_, group_ordinal_);
      group_first_ = nullptr;
    }
  }

  void all_reduce_host(double* values, int count) override {
    if (graph_mode_ != GraphMode::eager)
      throw std::logic_error("NCCL: all_reduce_host blocks the host; it cannot be part of a CUDA graph's micro-step");
    if (count > kMaxScalars) throw std::invalid_argument("all_reduce_host: at most 64 values");
    CUDA_CHECK(cudaMemcpyAsync(scalars_, values, count * sizeof(double), cudaMemcpyHostToDevice, stream_));
    const std::int64_t ordinal = progress().count_collective();
    NCCL_SETTLE(ncclAllReduce(scalars_, scalars_, static_cast<std::size_t>(count), ncclFloat64, ncclSum, comm_, stream_));
    issued("all_reduce (host scalars)", ordinal);
    CUDA_CHECK(cudaMemcpyAsync(values, scalars_, count * sizeof(double), cudaMemcpyDeviceToHost, stream_));
    // Blocks until the peers join; the watchdog aborts the communicator (which ends the kernel) past the timeout.
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
  // Capturing: the collectives go into the graph, unwatched (their completion events would be graph nodes the
  // watchdog cannot query). Replayed: the launch's collectives are counted and watched; the engine has ordered
  // this stream after the graph (ZeroEngine::replay_graph_bookkeeping), so their completion events fire once the
  // graph's collectives are done, and a hung peer is caught as in eager work.
  void set_graph_mode(GraphMode mode) override { graph_mode_ = mode; }

 private:
  static constexpr int kMaxScalars = 64;

  // A collective enqueued on the stream (or the first of a group, launched at its ncclGroupEnd) and the event
  // recorded after it: the watchdog pops it once the event has fired.
  struct Pending {
    cudaEvent_t done;
    const char* collective;
    std::int64_t ordinal;
    std::chrono::steady_clock::time_point enqueued;
  };

  void count_bytes(CommKind kind, std::int64_t bytes) {
    if (world_ > 1) counters_.add(kind, bytes);
  }

  // Polls a call that answered ncclInProgress until the communicator settles, at most the collective timeout;
  // an error (at once or while polling) is thrown with NCCL's last error text, the call and file:line.
  void settle(ncclResult_t result, const char* call, const char* file, int line) {
    const auto deadline = std::chrono::steady_clock::now() + timeout();
    while (result == ncclInProgress) {
      if (std::chrono::steady_clock::now() > deadline) {
        char text[160];
        std::snprintf(text, sizeof text, "did not complete within %g s (--collective-timeout): a peer rank did not join",
                      watch_.timeout_s);
        throw std::runtime_error(std::string("NCCL ") + call + " on rank " + std::to_string(rank_) + " " + text +
                                 " (" + file + ":" + std::to_string(line) + ")");
      }
      std::this_thread::yield();
      if (comm_ == nullptr) break;
      const ncclResult_t query = ncclCommGetAsyncError(comm_, &result);
      if (query != ncclSuccess) result = query;
    }
    if (result == ncclSuccess) return;
    const char* last = comm_ ? ncclGetLastError(comm_) : nullptr;
    throw std::runtime_error(std::string("NCCL error ") + ncclGetErrorString(result) + " in " + call + " at " + file +
                             ":" + std::to_string(line) + (last && *last ? std::string(": ") + last : std::string()));
  }
  std::chrono::steady_clock::duration timeout() const {
    return std::chrono::duration_cast<std::chrono::steady_clock::duration>(
        std::chrono::duration<double>(watch_.timeout_s));
  }

  void issued(const char* collective, std::int64_t ordinal) {
    if (graph_mode_ == GraphMode::capturing) return;
    if (group_depth_ > 0) {
      if (!group_first_) group_first_ = collective, group_ordinal_ = ordinal;
      return;
    }
    record_completion(collective, ordinal);
  }

  void record_completion(const char* collective, std::int64_t ordinal) {
    cudaEvent_t done = nullptr;
    {
      std::lock_guard<std::mutex> lock(pending_mutex_);
      if (!free_events_.empty()) {
        done = free_events_.back();
        free_events_.pop_back();
      }
    }
    if (!done) CUDA_CHECK(cudaEventCreateWithFlags(&done, cudaEventDisableTiming));
    CUDA_CHECK(cudaEventRecord(done, stream_));
    std::lock_guard<std::mutex> lock(pending_mutex_);
    pending_.push_back({done, collective, ordinal, std::chrono::steady_clock::now()});
  }

  // One watchdog pass: the asynchronous error, the completed collectives, the oldest one's age.
  void watch_once() {
    if (failed_) return;
    if (!watch_thread_on_device_) {
      if (cudaSetDevice(device_) != cudaSuccess) return;  // tried again next pass
      watch_thread_on_device_ = true;
    }
    ncclResult_t async = ncclSuccess;
    const ncclResult_t query = ncclCommGetAsyncError(comm_, &async);
    if (query != ncclSuccess) async = query;
    if (async != ncclSuccess && async != ncclInProgress) {
      const char* last = ncclGetLastError(comm_);
      fail(std::string("asynchronous NCCL error ") + ncclGetErrorString(async) + (last && *last ? std::string(": ") + last : "") +
           " (" + describe(progress().snapshot()) + ")");
      return;
    }
    Pending oldest{};
    bool waiting = false;
    {
      std::lock_guard<std::mutex> lock(pending_mutex_);
      while (!pending_.empty()) {
        const cudaError_t state = cudaEventQuery(pending_.front().done);
        if (state == cudaErrorNotReady) break;
        if (state != cudaSuccess) {
          const Pending p = pending_.front();
          fail(std::string("CUDA error ") + cudaGetErrorName(state) + " (" + cudaGetErrorString(state) + ") on the " +
               "communication stream after " + p.collective + " #" + std::to_string(p.ordinal));
          return;
        }
        free_events_.push_back(pending_.front().done);
        pending_.pop_front();
      }
      if (!pending_.empty()) oldest = pending_.front(), waiting = true;
    }
    if (waiting) {
      if (oldest.ordinal != waiting_ordinal_) progress().set_waiting(oldest.collective, oldest.ordinal, oldest.enqueued);
      waiting_ordinal_ = oldest.ordinal;
      if (std::chrono::steady_clock::now() - oldest.enqueued > timeout()) {
        const RankProgress::Snapshot s = progress().snapshot();
        char text[256];
        std::snprintf(text, sizeof text, "%s #%lld (step %lld, phase %s) did not complete within %g s "
                      "(--collective-timeout): a peer rank is gone or stuck", oldest.collective,
                      static_cast<long long>(oldest.ordinal), static_cast<long long>(s.step), s.phase, watch_.timeout_s);
        fail(text);
      }
    } else if (waiting_ordinal_ != 0) {
      progress().set_waiting(nullptr, 0);
      waiting_ordinal_ = 0;
    }
  }

  // Says why, aborts the communicator (its kernels end, so nothing waits for a dead peer) and stops the process:
  // the launcher sees the exit and ends the other ranks. The training thread may be blocked in a CUDA wait; it
  // is never returned to.
  void fail(const std::string& why) {
    if (failed_.exchange(true)) return;
    report_comm_failure(watch_, "rank " + std::to_string(rank_) + " of " + std::to_string(world_) + ": " + why +
                                    "; aborting the NCCL communicator and stopping this rank");
    ncclCommAbort(comm_);
    std::_Exit(kCommFailureExitStatus);
  }

  // Normal end: wait (bounded) for this rank's collectives, finalize (non-blocking: polled) and destroy. A
  // failing rank, or a peer that never completes them, gets ncclCommAbort: ncclCommDestroy would wait for
  // collectives that peers never join (as PyTorch's NCCLComm destructor reasons).
  void release(bool abort) {
    if (comm_ && !abort && drained())
      for (const auto& [p, w] : windows_) ncclCommWindowDeregister(comm_, w);
    if (comm_) {
      if (!abort) abort = !drained() || !finalized();
      if (abort) ncclCommAbort(comm_);
      else ncclCommDestroy(comm_);
    }
    for (const Pending& p : pending_) cudaEventDestroy(p.done);
    for (cudaEvent_t e : free_events_) cudaEventDestroy(e);
    pending_.clear();
    free_events_.clear();
    if (scalars_) cudaFree(scalars_);
    for (const auto& [p, w] : windows_) ncclMemFree(p);
    windows_.clear();
    if (stream_) cudaStreamDestroy(stream_);
    comm_ = nullptr;
    scalars_ = nullptr;
    stream_ = nullptr;
  }
  bool drained() {
    const auto deadline = std::chrono::steady_clock::now() + timeout();
    cudaError_t state;
    while ((state = cudaStreamQuery(stream_)) == cudaErrorNotReady && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    return state == cudaSuccess;
  }
  bool finalized() {
    ncclResult_t state = ncclCommFinalize(comm_);
    const auto deadline = std::chrono::steady_clock::now() + timeout();
    while (state == ncclInProgress && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
      if (ncclCommGetAsyncError(comm_, &state) != ncclSuccess) return false;
    }
    return state == ncclSuccess;
  }

  int rank_, world_, device_;
  cudaStream_t stream_ = nullptr;
  ncclComm_t comm_ = nullptr;
  double* scalars_ = nullptr;
  std::vector<std::pair<void*, ncclWindow_t>> windows_;  // allocate_window's memory and registrations
  bool windows_allowed_ = false;                          // copy_engine_gathers
  int group_depth_ = 0;
  const char* group_first_ = nullptr;  // the group's first collective, named for the whole group
  std::int64_t group_ordinal_ = 0;
  std::mutex pending_mutex_;  // pending_ and free_events_: the training thread and the watchdog
  std::deque<Pending> pending_;
  std::vector<cudaEvent_t> free_events_;
  std::atomic<bool> failed_{false};
  bool watch_thread_on_device_ = false;  // the watchdog thread's own state
  std::int64_t waiting_ordinal_ = 0;     // the watchdog thread's own state
  std::unique_ptr<WatchdogThread> watchdog_;  // last: stopped first
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
  void set_graph_mode(GraphMode mode) override { graph_mode_ = mode; }

 private:
  void copy(const void* send, void* recv, std::int64_t bytes) {
    if (send != recv && bytes > 0 && graph_mode_ != GraphMode::replayed)
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
                                                     Communicator* mpi, const CommWatch& watch,
                                                     bool copy_engine_gathers) {
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
  return std::make_unique<NcclCommunicator>(rank, world, device, id, watch, copy_engine_gathers);
}

}  // namespace zeroplan::exec
