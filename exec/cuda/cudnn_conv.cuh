// Convolutions of the layer-list networks through cuDNN 9 (cudnn_cnn.h: cudnnConvolutionForward,
// cudnnConvolutionBackwardData, cudnnConvolutionBackwardFilter), channels-last: NHWC activations and KRSC filters,
// the layout cuDNN's tensor-core kernels take without transposing (NVIDIA's cuDNN developer guide, "Tensor Layouts";
// PyTorch's channels_last memory format serves the same kernels). 16-bit data computes in fp32 with tensor-core math;
// fp32 data uses FMA math only (no TF32), so the fp32 mode is a precise reference, as the executor's GEMMs are.
//
// Each distinct geometry is planned once, through cuDNN's graph API (cudnn_graph.h, the backend descriptors that
// cudnn-frontend and PyTorch use): per direction, the engine configurations of heuristic mode A that fit the fixed
// workspace kCudnnWorkspaceBytes (exec/activation_accounting.h) are timed on the real buffers and the fastest kept, as
// torch.backends.cudnn.benchmark does; under --deterministic the first deterministic one of the ranking (a choice by
// timing may differ from run to run). A fixed workspace makes the device memory a plan predicts the memory a run
// allocates.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <cuda_runtime.h>

#include "exec/exec_config.h"

namespace zeroplan::exec::cuda {

using i64 = std::int64_t;

// A convolution of N images (C, H, W) -> (K, OH, OW) with a square kernel R = S, symmetric stride, padding,
// dilation, and groups (PyTorch's Conv2d).
struct ConvShape {
  i64 N = 0, C = 0, H = 0, W = 0, K = 0, R = 1, stride = 1, padding = 0, dilation = 1, groups = 1;
  i64 OH() const { return (H + 2 * padding - dilation * (R - 1) - 1) / stride + 1; }
  i64 OW() const { return (W + 2 * padding - dilation * (R - 1) - 1) / stride + 1; }
  bool operator==(const ConvShape& o) const {  // CUDA sources are C++17: no defaulted comparison
    return N == o.N && C == o.C && H == o.H && W == o.W && K == o.K && R == o.R && stride == o.stride &&
           padding == o.padding && dilation == o.dilation && groups == o.groups;
  }
};

class CudnnConvolutions {
 public:
  // The handle is bound to `stream`; `workspace` (workspace_bytes) is used by every call on that stream only.
  CudnnConvolutions(ExecPrecision precision, cudaStream_t stream, void* workspace, std::size_t workspace_bytes,
                    bool deterministic);
  ~CudnnConvolutions();
  CudnnConvolutions(const CudnnConvolutions&) = delete;
  CudnnConvolutions& operator=(const CudnnConvolutions&) = delete;

  // Plans a geometry (once; later calls return the same id). The buffers are scratch of the right sizes that the
  // algorithm search may overwrite: x (N,H,W,C), w (K,R,S,C/groups), y (N,OH,OW,K), each of the model's element type.
  int plan(const ConvShape& shape, void* x, void* w, void* y);
  // y = conv(x, w); dx = convT(dy, w) and dw = the filter gradient, each written, or added when accumulate.
  void forward(int conv, void* y, const void* x, const void* w);
  void backward_data(int conv, void* dx, const void* dy, const void* w, bool accumulate);
  void backward_filter(int conv, void* dw, const void* dy, const void* x, bool accumulate);

 private:
  struct Op;
  struct Plan;
  enum class Direction { forward, data, filter };
  void release() noexcept;
  std::unique_ptr<Op> build(const Plan& p, Direction direction, float beta, const std::string& what, void* x, void* w,
                            void* y);
  int execute(Op& op, const void* x, const void* w, const void* y);  // cuDNN's status
  ExecPrecision precision_;
  cudaStream_t stream_;
  void* workspace_;
  std::size_t workspace_bytes_;
  bool deterministic_;
  void* handle_ = nullptr;  // cudnnHandle_t (kept out of this header so that C++ files may include it)
  cudaEvent_t timing_start_ = nullptr, timing_end_ = nullptr;  // the engine search's timing
  std::vector<std::unique_ptr<Plan>> plans_;
};

}  // namespace zeroplan::exec::cuda
