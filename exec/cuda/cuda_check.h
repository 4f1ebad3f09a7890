// Error checks for every CUDA runtime and cuBLASLt call: a failure throws CudaError with the call, the file
// and the line, so the run stops with a message instead of a crash or a silent wrong result.
#pragma once

#include <stdexcept>
#include <string>

#include <cublasLt.h>
#include <cuda_runtime.h>

namespace zeroplan::exec {

class CudaError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

[[noreturn]] inline void throw_cuda(cudaError_t err, const char* call, const char* file, int line) {
  throw CudaError(std::string("CUDA error ") + cudaGetErrorName(err) + " (" + cudaGetErrorString(err) + ") in " +
                  call + " at " + file + ":" + std::to_string(line));
}
[[noreturn]] inline void throw_cublas(cublasStatus_t st, const char* call, const char* file, int line) {
  throw CudaError(std::string("cuBLASLt error ") + std::to_string(static_cast<int>(st)) + " in " + call + " at " +
                  file + ":" + std::to_string(line));
}

}  // namespace zeroplan::exec

#define CUDA_CHECK(call)                                                                    \
  do {                                                                                      \
    cudaError_t zp_err_ = (call);                                                           \
    if (zp_err_ != cudaSuccess) ::zeroplan::exec::throw_cuda(zp_err_, #call, __FILE__, __LINE__); \
  } while (0)

#define CUBLAS_CHECK(call)                                                                        \
  do {                                                                                            \
    cublasStatus_t zp_st_ = (call);                                                               \
    if (zp_st_ != CUBLAS_STATUS_SUCCESS) ::zeroplan::exec::throw_cublas(zp_st_, #call, __FILE__, __LINE__); \
  } while (0)

// After a kernel launch: launch-configuration errors surface here, with the launch site.
#define CUDA_CHECK_LAUNCH() CUDA_CHECK(cudaGetLastError())
