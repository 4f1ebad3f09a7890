#include "exec/comm/mpi_communicator.h"

#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>

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

namespace {

void mpi_check(int code, const char* call, const char* file, int line) {
  if (code == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  MPI_Error_string(code, text, &length);
  throw std::runtime_error(std::string("MPI error at ") + file + ":" + std::to_string(line) + ": " + call + ": " +
                           std::string(text, static_cast<std::size_t>(length)));
}
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

class MpiCommunicator final : public Communicator {
 public:
  MpiCommunicator() {
    int initialized = 0;
    MPI_CHECK(MPI_Initialized(&initialized));
    if (!initialized) {
      int provided = 0;
      MPI_CHECK(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided));
    }
    // Errors come back as codes (and are turned into exceptions naming the call), not as an abort.
    MPI_CHECK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
    MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank_));
    MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &world_));
  }
  ~MpiCommunicator() override {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized) MPI_Finalize();
  }

  int rank() const override { return rank_; }
  int world() const override { return world_; }
  std::string backend() const override { return "mpi"; }

  void all_reduce_sum(const void* send, void* recv, std::int64_t count, CommDtype type) override {
    const void* s = send == recv ? MPI_IN_PLACE : send;
    MPI_CHECK(MPI_Allreduce(s, recv, mpi_count(count), mpi_type(type), MPI_SUM, MPI_COMM_WORLD));
    count_bytes(CommKind::all_reduce, count * comm_dtype_bytes(type));
  }
  void reduce_scatter_sum(const void* send, void* recv, std::int64_t recv_count, CommDtype type) override {
    const int bytes = comm_dtype_bytes(type);
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
    MPI_CHECK(MPI_Allgather(in_place ? MPI_IN_PLACE : send, mpi_count(send_count), mpi_type(type), recv,
                            mpi_count(send_count), mpi_type(type), MPI_COMM_WORLD));
    count_bytes(CommKind::all_gather, send_count * world_ * bytes);
  }
  void group_start() override {}
  void group_end() override {}
  void all_reduce_host(double* values, int count) override {
    MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, values, count, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD));
    if (world_ > 1) {
      counters_.control_calls += 1;
      counters_.control_bytes += 8 * static_cast<std::int64_t>(count);
    }
  }
  void barrier() override { MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD)); }
  void* comm_stream() const override { return nullptr; }

 private:
  void count_bytes(CommKind kind, std::int64_t bytes) {
    if (world_ > 1) counters_.add(kind, bytes);
  }
  int rank_ = 0, world_ = 1;
};

}  // namespace

std::unique_ptr<Communicator> make_mpi_communicator() { return std::make_unique<MpiCommunicator>(); }

#else

bool mpi_available() { return false; }
std::unique_ptr<Communicator> make_mpi_communicator() {
  throw std::runtime_error("this zeroplan was built without MPI (install libopenmpi-dev and reconfigure)");
}

#endif

}  // namespace zeroplan::exec
