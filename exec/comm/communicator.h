// The collectives the ZeRO engine issues, behind one small interface with two implementations: NCCL on the CUDA
// backend (exec/comm/nccl_communicator.*) and MPI on the CPU backend (exec/comm/mpi_communicator.*). No
// collective is written by hand: each call is one library collective.
//
// Byte counting follows the planner's communication model (sim/comm_model.h) and nccl-tests: the bytes of a
// collective are those of the full buffer S, i.e. count * element bytes for an all-reduce, recv_count * n for a
// reduce-scatter and send_count * n for an all-gather, counted on the rank where the call is issued. Scalar
// reductions that decide control flow (loss, gradient norm, overflow) are counted apart as `control` traffic so
// that the model-state bytes can be compared with the plan exactly.
#pragma once

#include <array>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "exec/comm/collective_watchdog.h"
#include "exec/comm/rank_progress.h"

namespace zeroplan::exec {

enum class CommDtype { f32, f16, bf16, f64 };
int comm_dtype_bytes(CommDtype type);

// How the model-state collectives and a backend's lane work are issued where a training micro-step is replayed as
// a CUDA graph (exec/cuda/step_graphs.cuh):
//   eager      issued to their streams (the usual);
//   capturing  recorded into the graph being captured: the same calls, but nothing that watches them from the host
//              (a captured operation never completes as such: only its replays run);
//   replayed   the calls of a micro-step whose graph has just been launched: only the host's bookkeeping advances
//              (collective counters and ordinals, time-mark indices, the engine's state); nothing is issued again.
enum class GraphMode { eager, capturing, replayed };

enum class CommKind : int { all_reduce = 0, reduce_scatter = 1, all_gather = 2 };
inline constexpr int kCommKinds = 3;
const char* to_string(CommKind kind);  // "all_reduce", ... (the keys of the plan's comm_bytes_per_step)

// What crossed the wire from this rank's point of view (the full-buffer convention above).
struct CommCounters {
  std::array<std::int64_t, kCommKinds> calls{};
  std::array<std::int64_t, kCommKinds> bytes{};
  std::int64_t control_calls = 0;
  std::int64_t control_bytes = 0;
  void add(CommKind kind, std::int64_t full_bytes) {
    calls[static_cast<int>(kind)] += 1;
    bytes[static_cast<int>(kind)] += full_bytes;
  }
};

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int world() const = 0;
  virtual std::string backend() const = 0;  // "nccl" or "mpi"

  // Model-state collectives. On NCCL they are enqueued on the communicator's stream (comm_stream()) and return
  // at once; on MPI they complete before returning. Buffers are device pointers on NCCL, host pointers on MPI.
  // In-place use follows NCCL's rules: all_reduce with send == recv; reduce_scatter with
  // recv == send + rank * recv_count; all_gather with send == recv + rank * send_count.
  virtual void all_reduce_sum(const void* send, void* recv, std::int64_t count, CommDtype type) = 0;
  virtual void reduce_scatter_sum(const void* send, void* recv, std::int64_t recv_count, CommDtype type) = 0;
  virtual void all_gather(const void* send, void* recv, std::int64_t send_count, CommDtype type) = 0;
  // Device memory of `bytes` registered with every rank as a symmetric window (collective: every rank calls it, in
  // the same order, with the same size), owned by the communicator and freed when it goes; null where the
  // communicator has none (MPI, one rank). NCCL 2.28 runs an all-gather whose output lies in such a window on the
  // GPUs' copy engines, with no SMs, under the zero-CTA policy its communicators are created with
  // (nccl_communicator.cpp; NCCL 2.28.1 release notes, "CE (Copy Engine) Collectives").
  virtual void* allocate_window(std::int64_t) { return nullptr; }
  // Several collectives issued as one (ncclGroupStart/End; a no-op on MPI, whose calls are already complete).
  virtual void group_start() = 0;
  virtual void group_end() = 0;

  // A sum over ranks of a few host doubles (loss sums, norm partials, overflow flags), blocking; counted as
  // control traffic. Deterministic: every rank receives the same bits.
  virtual void all_reduce_host(double* values, int count) = 0;
  // Blocks until every rank arrives (used around timing and at shutdown).
  virtual void barrier() = 0;

  // The stream the collectives run on (cudaStream_t as void*; null on MPI).
  virtual void* comm_stream() const = 0;

  // The collectives of a CUDA graph's micro-step (GraphMode). Only the GPU communicators take part; the others
  // refuse anything but eager.
  virtual void set_graph_mode(GraphMode mode) {
    if (mode != GraphMode::eager)
      throw std::logic_error("the " + backend() + " communicator's collectives cannot be part of a CUDA graph");
    graph_mode_ = mode;
  }
  GraphMode graph_mode() const { return graph_mode_; }

  const CommCounters& counters() const { return counters_; }
  void reset_counters() { counters_ = CommCounters{}; }

  // Where this rank stands (exec/comm/rank_progress.h): the communicator counts its collectives and marks the
  // one it waits for; the engine may set finer phases ("forward", "backward", "optimizer") for the messages.
  RankProgress& progress() { return *watch_.progress; }
  // The collective timeout this communicator enforces (exec/comm/collective_watchdog.h).
  double collective_timeout_s() const { return watch_.timeout_s; }

 protected:
  Communicator() { watch_.progress = &own_progress_; }
  // Derived constructors adopt the run's watch (its progress when given, else their own).
  void adopt_watch(const CommWatch& watch) {
    watch_ = watch;
    if (!watch_.progress) watch_.progress = &own_progress_;
  }
  CommCounters counters_;
  GraphMode graph_mode_ = GraphMode::eager;
  CommWatch watch_;

 private:
  RankProgress own_progress_;
};

// A communicator of one rank: every collective is a local copy (all-reduce and all-gather of one rank are the
// identity), so the engine runs the same code at world size 1 without a library. Host memory only (CPU backend).
// Nothing crosses a wire, so nothing is counted: a one-GPU plan has no collective either.
class SelfCommunicator final : public Communicator {
 public:
  int rank() const override { return 0; }
  int world() const override { return 1; }
  std::string backend() const override { return "self"; }
  void all_reduce_sum(const void* send, void* recv, std::int64_t count, CommDtype type) override;
  void reduce_scatter_sum(const void* send, void* recv, std::int64_t recv_count, CommDtype type) override;
  void all_gather(const void* send, void* recv, std::int64_t send_count, CommDtype type) override;
  void group_start() override {}
  void group_end() override {}
  void all_reduce_host(double*, int count) override;
  void barrier() override {}
  void* comm_stream() const override { return nullptr; }
};

}  // namespace zeroplan::exec
