#include "exec/comm/communicator.h"

#include <cstring>

namespace zeroplan::exec {

int comm_dtype_bytes(CommDtype type) {
  switch (type) {
    case CommDtype::f32: return 4;
    case CommDtype::f16: return 2;
    case CommDtype::bf16: return 2;
    case CommDtype::f64: return 8;
  }
  return 0;
}

const char* to_string(CommKind kind) {
  switch (kind) {
    case CommKind::all_reduce: return "all_reduce";
    case CommKind::reduce_scatter: return "reduce_scatter";
    case CommKind::all_gather: return "all_gather";
  }
  return "?";
}

namespace {
void copy_if_distinct(const void* send, void* recv, std::int64_t bytes) {
  if (send != recv && bytes > 0) std::memmove(recv, send, static_cast<std::size_t>(bytes));
}
}  // namespace

void SelfCommunicator::all_reduce_sum(const void* send, void* recv, std::int64_t count, CommDtype type) {
  const std::int64_t bytes = count * comm_dtype_bytes(type);
  copy_if_distinct(send, recv, bytes);
}

void SelfCommunicator::reduce_scatter_sum(const void* send, void* recv, std::int64_t recv_count, CommDtype type) {
  const std::int64_t bytes = recv_count * comm_dtype_bytes(type);
  copy_if_distinct(send, recv, bytes);
}

void SelfCommunicator::all_gather(const void* send, void* recv, std::int64_t send_count, CommDtype type) {
  const std::int64_t bytes = send_count * comm_dtype_bytes(type);
  copy_if_distinct(send, recv, bytes);
}

void SelfCommunicator::all_reduce_host(double*, int) {}

}  // namespace zeroplan::exec
