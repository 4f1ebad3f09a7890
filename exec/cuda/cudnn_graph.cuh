// What the users of cuDNN's graph API (cudnn_graph.h: the backend descriptors cudnn-frontend and PyTorch build on)
// share: every call checked, a failure thrown as CudaError with the call, the file:line and cuDNN's status string;
// one cudnnBackendDescriptor_t owned per object. Used by the convolutions (cudnn_conv.cu) and the fused attention
// (cudnn_attention.cu). cuDNN says more about a refusal in its own log: CUDNN_LOGLEVEL_DBG=2 (warnings and errors;
// 3 adds every API call) with CUDNN_LOGDEST_DBG=stderr (or a file name), set before the process starts.
#pragma once

#include <string>

#include <cudnn.h>

#include "exec/cuda/cuda_check.h"
#include "exec/exec_config.h"

namespace zeroplan::exec::cuda {

[[noreturn]] void throw_cudnn(cudnnStatus_t status, const char* call, const char* file, int line);

// cuDNN's element type of a model precision.
cudnnDataType_t cudnn_data_type(ExecPrecision precision);

// One cudnnBackendDescriptor_t, destroyed with the object.
class CudnnDescriptor {
 public:
  explicit CudnnDescriptor(cudnnBackendDescriptorType_t type);
  ~CudnnDescriptor() {
    if (d_) cudnnBackendDestroyDescriptor(d_);
  }
  CudnnDescriptor(const CudnnDescriptor&) = delete;
  CudnnDescriptor& operator=(const CudnnDescriptor&) = delete;
  cudnnBackendDescriptor_t get() const { return d_; }
  void finalize();

 private:
  cudnnBackendDescriptor_t d_ = nullptr;
};

}  // namespace zeroplan::exec::cuda

#define CUDNN_CHECK(call)                                                                               \
  do {                                                                                                  \
    cudnnStatus_t zp_st_ = (call);                                                                      \
    if (zp_st_ != CUDNN_STATUS_SUCCESS) ::zeroplan::exec::cuda::throw_cudnn(zp_st_, #call, __FILE__, __LINE__); \
  } while (0)
// A status returned by a helper (an int where the header keeps cudnn.h out), checked at the call site.
#define CUDNN_CHECK_STATUS(status) CUDNN_CHECK(static_cast<cudnnStatus_t>(status))
// One attribute of a backend descriptor (cudnnBackendSetAttribute), checked at the call site.
#define CUDNN_SET(desc, name, type, count, values) \
  CUDNN_CHECK(cudnnBackendSetAttribute((desc), (name), (type), (count), (values)))
