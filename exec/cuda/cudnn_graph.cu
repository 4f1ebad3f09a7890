#include "exec/cuda/cudnn_graph.cuh"

#include <stdexcept>

namespace zeroplan::exec::cuda {

void throw_cudnn(cudnnStatus_t st, const char* call, const char* file, int line) {
  throw CudaError(std::string("cuDNN error ") + cudnnGetErrorString(st) + " in " + call + " at " + file + ":" +
                  std::to_string(line));
}

cudnnDataType_t cudnn_data_type(ExecPrecision p) {
  switch (p) {
    case ExecPrecision::fp32: return CUDNN_DATA_FLOAT;
    case ExecPrecision::fp16: return CUDNN_DATA_HALF;
    case ExecPrecision::bf16: return CUDNN_DATA_BFLOAT16;
  }
  throw std::invalid_argument("cudnn: unknown precision");
}

CudnnDescriptor::CudnnDescriptor(cudnnBackendDescriptorType_t type) {
  CUDNN_CHECK(cudnnBackendCreateDescriptor(type, &d_));
}

void CudnnDescriptor::finalize() { CUDNN_CHECK(cudnnBackendFinalize(d_)); }

}  // namespace zeroplan::exec::cuda
