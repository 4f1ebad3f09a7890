#include "exec/comm/mpi_communicator.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#ifdef ZEROPLAN_HAVE_MPI
#include <mpi.h>
#endif

namespace zeroplan::exec {

bool launched_by_mpi() {
  return std::getenv("OMPI_COMM_WORLD_SIZE") != nullptr || std::getenv("PMI_SIZE") != nullptr ||
         std::getenv("PMIX_RANK") != nullptr;
}

#ifdef ZEROPLAN_HAVE_MPI

bool mpi_available() { return true; }

void mpi_check(int code, const char* call, const char* file, int line) {
  if (code == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  if (MPI_Error_string(code, text, &length) != MPI_SUCCESS) length = std::snprintf(text, sizeof text, "code %d", code);
  throw std::runtime_error(std::string("MPI error at ") + file + ":" + std::to_string(line) + ": " + call + ": " +
                           std::string(text, static_cast<std::size_t>(length)));
}

void abort_mpi_world(int status) {
  int initialized = 0, finalized = 0;
  if (MPI_Initialized(&initialized) != MPI_SUCCESS || !initialized) return;
  if (MPI_Finalized(&finalized) != MPI_SUCCESS || finalized) return;
  MPI_Abort(MPI_COMM_WORLD, status);
}

namespace {

#define MPI_CHECK(call) mpi_check((call), #call, __FILE__, __LINE__)

MPI_Datatype mpi_type(CommDtype type) {
  switch (type) {
    case CommDtype::f32: return MPI_FLOAT;
    case CommDtype::f64: return MPI_DOUBLE;
    default: throw std::invalid_argument("MPI communicator: 16-bit collectives need the NCCL backend (the CPU "
                                         "backend trains in fp32)");
  }
}

// MPI counts are int: split nothing silently, refuse what does not fit.
int mpi_count(std::int64_t count) {
  if (count < 0 || count > 0x7fffffff) throw std::length_error("MPI communicator: count " + std::to_string(count) +
                                                               " exceeds MPI's int count");
  return static_cast<int>(count);
}

// What a peer's watchdog answers when asked where its rank stands (bytes between ranks of one build).
struct PeerState {
  std::int64_t step = 0;
  std::int64_t ordinal = 0;      // of the collective waited in
  std::int64_t collectives = 0;  // issued so far
  double seconds_in_state = 0;
  char phase[32] = {};
  char collective[32] = {};  // empty: outside any collective
};

PeerState to_peer_state(const RankProgress::Snapshot& s) {
  PeerState p;
  p.step = s.step;
  p.ordinal = s.ordinal;
  p.collectives = s.collectives;
  p.seconds_in_state = s.seconds_in_state;
  std::snprintf(p.phase, sizeof p.phase, "%s", s.phase);
  std::snprintf(p.collective, sizeof p.collective, "%s", s.collective ? s.collective : "");
  return p;
}

RankProgress::Snapshot from_peer_state(const PeerState& p) {
  RankProgress::Snapshot s;
  s.step = p.step;
  s.ordinal = p.ordinal;
  s.collectives = p.collectives;
  s.seconds_in_state = p.seconds_in_state;
  s.phase = p.phase;
  s.collective = p.collective[0] ? p.collective : nullptr;
  return s;
}

constexpr int kQueryTag = 7301;   // "where are you?"
constexpr int kAnswerTag = 7302;  // a PeerState

class MpiCommunicator final : public Communicator {
 public:
  explicit MpiCommunicator(const CommWatch& watch) {
    adopt_watch(watch);
    int initialized = 0;
    MPI_CHECK(MPI_Initialized(&initialized));
    int provided = 0;
    if (!initialized) {
      MPI_CHECK(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided));
    } else {
      MPI_CHECK(MPI_Query_thread(&provided));
    }
    // Errors come back as codes (and are turned into exceptions naming the call), not as an abort.
    MPI_CHECK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
    MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank_));
    MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &world_));
    if (world_ == 1) return;  // no peer to wait for: no watchdog
    // The watchdog thread calls MPI (probes, answers, MPI_Abort) while the training thread is inside a
    // collective: MPI_THREAD_MULTIPLE (MPI 4.0 sec. 11.2.1). Open MPI 4 provides it (ompi_info: "MPI_THREAD_MULTIPLE:
    // yes").
    if (provided < MPI_THREAD_MULTIPLE)
      throw std::runtime_error("MPI communicator: this MPI library does not provide MPI_THREAD_MULTIPLE, which the "
                               "collective watchdog needs (Open MPI 4 and later do)");
    // The peers' questions travel on their own communicator, never mixed with the training collectives.
    MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &watch_comm_));
    MPI_CHECK(MPI_Comm_set_errhandler(watch_comm_, MPI_ERRORS_RETURN));
    watchdog_ = std::make_unique<WatchdogThread>(watchdog_period(watch_.timeout_s), [this] { watch_once(); });
  }
  ~MpiCommunicator() override {
    watchdog_.reset();  // stopped before MPI goes
    // A failing rank (an exception propagates through here) leaves MPI up: MPI_Finalize would wait for peers
    // that wait for this rank; the failure path calls abort_mpi_world().
    if (std::uncaught_exceptions() > 0) return;
    if (watch_comm_ != MPI_COMM_NULL) MPI_Comm_free(&watch_comm_);
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized) MPI_Finalize();
  }

  int rank() const override { return rank_; }
  int world() const override { return world_; }
  std::string backend() const override { return "mpi"; }

  void all_reduce_sum(const void* send, void* recv, std::int64_t count, CommDtype type) override {
    const void* s = send == recv ? MPI_IN_PLACE : send;
    Waiting wait(*this, "all_reduce");
    MPI_CHECK(MPI_Allreduce(s, recv, mpi_count(count), mpi_type(type), MPI_SUM, MPI_COMM_WORLD));
    count_bytes(CommKind::all_reduce, count * comm_dtype_bytes(type));
  }
  void reduce_scatter_sum(const void* send, void* recv, std::int64_t recv_count, CommDtype type) override {
    const int bytes = comm_dtype_bytes(type);
    Waiting wait(*this, "reduce_scatter");
    // MPI_Reduce_scatter_block cannot take NCCL's in-place form (recv inside send); MPI_IN_PLACE means "the
    // result goes to the start of recv", so an in-place call reduces in place and moves the rank's block.
    if (recv == static_cast<const char*>(send) + static_cast<std::int64_t>(rank_) * recv_count * bytes) {
      void* buffer = const_cast<void*>(send);
      MPI_CHECK(MPI_Reduce_scatter_block(MPI_IN_PLACE, buffer, mpi_count(recv_count), mpi_type(type), MPI_SUM,
                                         MPI_COMM_WORLD));
      if (rank_ != 0) std::memmove(recv, buffer, static_cast<std::size_t>(recv_count * bytes));
    } else {
      MPI_CHECK(MPI_Reduce_scatter_block(send, recv, mpi_count(recv_count), mpi_type(type), MPI_SUM, MPI_COMM_WORLD));
    }
    count_bytes(CommKind::reduce_scatter, recv_count * world_ * bytes);
  }
  void all_gather(const void* send, void* recv, std::int64_t send_count, CommDtype type) override {
    const int bytes = comm_dtype_bytes(type);
    const bool in_place = send == static_cast<const char*>(recv) + static_cast<std::int64_t>(rank_) * send_count * bytes;
    Waiting wait(*this, "all_gather");
    MPI_CHECK(MPI_Allgather(in_place ? MPI_IN_PLACE : send, mpi_count(send_count), mpi_type(type), recv,
                            mpi_count(send_count), mpi_type(type), MPI_COMM_WORLD));
    count_bytes(CommKind::all_gather, send_count * world_ * bytes);
  }
  void group_start() override {}
  void group_end() override {}
  void all_reduce_host(double* values, int count) override {
    Waiting wait(*this, "all_reduce (host scalars)");
    MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, values, count, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD));
    if (world_ > 1) {
      counters_.control_calls += 1;
      counters_.control_bytes += 8 * static_cast<std::int64_t>(count);
    }
  }
  void barrier() override {
    Waiting wait(*this, "barrier");
    MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
  }
  void* comm_stream() const override { return nullptr; }

 private:
  // Marks the blocking collective this rank is in, for the watchdog and the heartbeats. The watchdog checks
  // this communicator's own waits: the progress may be shared with an NCCL communicator (the CUDA backend
  // under mpirun), whose waits its own watchdog checks.
  class Waiting {
   public:
    Waiting(MpiCommunicator& comm, const char* collective) : comm_(comm) {
      comm_.progress().set_waiting(collective, comm_.progress().count_collective());
      comm_.waiting_.store(true, std::memory_order_release);
    }
    ~Waiting() {
      comm_.waiting_.store(false, std::memory_order_release);
      comm_.progress().set_waiting(nullptr, 0);
    }
    Waiting(const Waiting&) = delete;
    Waiting& operator=(const Waiting&) = delete;

   private:
    MpiCommunicator& comm_;
  };

  void count_bytes(CommKind kind, std::int64_t bytes) {
    if (world_ > 1) counters_.add(kind, bytes);
  }

  // One watchdog pass: answer the peers' questions, then check this rank's wait against the timeout.
  void watch_once() {
    answer_queries();
    if (!waiting_.load(std::memory_order_acquire)) return;
    const RankProgress::Snapshot mine = progress().snapshot();
    if (!mine.collective || mine.seconds_in_state < watch_.timeout_s) return;
    const std::string peers = ask_peers(mine);
    char head[256];
    std::snprintf(head, sizeof head, "rank %d of %d: %s #%lld (step %lld, phase %s) did not complete within %g s "
                  "(--collective-timeout)", rank_, world_, mine.collective, static_cast<long long>(mine.ordinal),
                  static_cast<long long>(mine.step), mine.phase, watch_.timeout_s);
    report_comm_failure(watch_, std::string(head) + "; " + peers + "; stopping every rank (MPI_Abort)");
    MPI_Abort(MPI_COMM_WORLD, kCommFailureExitStatus);
    std::_Exit(kCommFailureExitStatus);  // MPI_Abort does not return; should it, this rank still stops
  }

  // The watchdog thread answers every pending "where are you?" with this rank's progress.
  void answer_queries() {
    for (;;) {
      int pending = 0;
      MPI_Status status;
      if (MPI_Iprobe(MPI_ANY_SOURCE, kQueryTag, watch_comm_, &pending, &status) != MPI_SUCCESS || !pending) return;
      int question = 0;
      if (MPI_Recv(&question, 1, MPI_INT, status.MPI_SOURCE, kQueryTag, watch_comm_, MPI_STATUS_IGNORE) != MPI_SUCCESS)
        return;
      const PeerState answer = to_peer_state(progress().snapshot());
      // A few dozen bytes: sent eagerly, so this returns without the asker's progress.
      MPI_Send(&answer, sizeof answer, MPI_BYTE, status.MPI_SOURCE, kAnswerTag, watch_comm_);
    }
  }

  // Asks every peer where it stands (a bounded wait: a dead or frozen peer does not answer) and says which
  // ranks never reached the collective this rank waits in.
  std::string ask_peers(const RankProgress::Snapshot& mine) {
    const auto deadline = std::chrono::steady_clock::now() +
                          std::chrono::milliseconds(static_cast<long long>(
                              1000 * std::clamp(watch_.timeout_s / 2, 1.0, 10.0)));
    std::vector<PeerState> answers(static_cast<std::size_t>(world_));
    std::vector<MPI_Request> receives(static_cast<std::size_t>(world_), MPI_REQUEST_NULL);
    std::vector<MPI_Request> questions(static_cast<std::size_t>(world_), MPI_REQUEST_NULL);
    std::vector<bool> answered(static_cast<std::size_t>(world_), false);
    int question = 1;
    for (int peer = 0; peer < world_; ++peer) {
      if (peer == rank_) continue;
      MPI_Irecv(&answers[peer], sizeof(PeerState), MPI_BYTE, peer, kAnswerTag, watch_comm_, &receives[peer]);
      MPI_Isend(&question, 1, MPI_INT, peer, kQueryTag, watch_comm_, &questions[peer]);
    }
    int waiting_for = world_ - 1;
    while (waiting_for > 0 && std::chrono::steady_clock::now() < deadline) {
      answer_queries();  // the peers that wait too ask this rank at the same time
      for (int peer = 0; peer < world_; ++peer) {
        if (peer == rank_ || answered[peer]) continue;
        int done = 0;
        if (MPI_Test(&receives[peer], &done, MPI_STATUS_IGNORE) == MPI_SUCCESS && done) {
          answered[peer] = true;
          --waiting_for;
        }
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    std::string behind, silent, with;
    for (int peer = 0; peer < world_; ++peer) {
      if (peer == rank_) continue;
      if (!answered[peer]) {
        silent += (silent.empty() ? "" : ", ") + std::to_string(peer);
        continue;
      }
      const RankProgress::Snapshot s = from_peer_state(answers[peer]);
      if (s.collectives < mine.ordinal)
        behind += (behind.empty() ? "" : "; ") + ("rank " + std::to_string(peer) + " never reached it (" +
                                                  describe(s) + ")");
      else
        with += (with.empty() ? "" : ", ") + std::to_string(peer);
    }
    std::string text = behind;
    if (!silent.empty())
      text += (text.empty() ? "" : "; ") + ("rank(s) " + silent + " did not answer (gone or frozen)");
    if (text.empty()) text = "every peer answered from inside this collective or past it (the collective itself stalled)";
    else if (!with.empty()) text += "; rank(s) " + with + " reached it";
    // The requests are left as they are: MPI_Abort follows.
    return text;
  }

  int rank_ = 0, world_ = 1;
  MPI_Comm watch_comm_ = MPI_COMM_NULL;
  std::atomic<bool> waiting_{false};  // in one of this communicator's blocking collectives
  std::unique_ptr<WatchdogThread> watchdog_;  // last: stopped first
};

}  // namespace

std::unique_ptr<Communicator> make_mpi_communicator(const CommWatch& watch) {
  return std::make_unique<MpiCommunicator>(watch);
}

#else

bool mpi_available() { return false; }
void abort_mpi_world(int) {}
std::unique_ptr<Communicator> make_mpi_communicator(const CommWatch&) {
  throw std::runtime_error("this zeroplan was built without MPI (install libopenmpi-dev and reconfigure)");
}

#endif

}  // namespace zeroplan::exec
