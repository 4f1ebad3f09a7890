// What the ZeRO engine's translation units share (zero_engine.cpp: buckets, reductions, stage 3, checkpoints;
// zero_engine_offload.cpp: ZeRO-Offload and parameter offload): byte offsets into typed buffers and step timing.
#pragma once

#include <chrono>
#include <cstdint>

#include "exec/comm/communicator.h"

namespace zeroplan::exec::detail {

// The address `elements` elements of `type` past `base`.
inline void* at(void* base, std::int64_t elements, CommDtype type) {
  return static_cast<char*>(base) + elements * comm_dtype_bytes(type);
}

inline double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace zeroplan::exec::detail
