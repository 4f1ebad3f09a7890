// Causal self-attention through cuDNN's fused flash-attention kernels (cuDNN developer guide, "Supported Graph
// Patterns": "Fused Flash Attention fprop" and "bprop"), on the executor's own layouts so that the trainer switches
// between these and its kernels (exec/cuda/attention.cuh) per shape with no copies:
//   qkv   rows (B*T) x (NH + 2*NKV)*HS: query head h at column h*HS, key head g at NH*HS + g*HS, value head g at
//         (NH + NKV)*HS + g*HS; Q, K and V are 4-D [B, heads, T, HS] strided views of it (strides T*W, HS, W, 1
//         for the row width W), K also read transposed ([B, NKV, HS, T], strides T*W, HS, 1, W)
//   out   rows (B*T) x NH*HS: [B, NH, T, HS], strides T*NH*HS, HS, NH*HS, 1; dout the same
//   lse   (B, NH, T) fp32: [B, NH, T, 1], strides NH*T, T, 1, 1. cuDNN's softmax statistics ("Stats") are
//         max + log(sum exp(s - max)) over the row of scaled, masked scores s, natural log: the logsumexp our
//         kernels and cpu::attention_forward save, so either backward reads the other's forward.
//   dqkv  like qkv.
// Grouped-query attention (NKV < NH, NH % NKV == 0): query head h reads key/value head h / (NH/NKV) (cuDNN's
// "b (hk g) s d" grouping, transformers' repeat_kv), dK and dV summed over each group's query heads.
// 16-bit types only (fp32 stays on our kernels); scale 1/sqrt(HS).
//
// cuDNN 9.14 (the GPU machines' system library) has no SDPA operation descriptor usable here, so each direction is
// the decomposed operation graph cudnn-frontend builds for its composite SDPA nodes, which cuDNN's runtime fusion
// engines recognise as flash attention (the graph, op by op, is in cudnn_attention.cu). Plans are built once per
// shape on first use and kept; the handle is this object's, bound to the caller's stream.
//
// Workspace: fixed and stated, given by the caller (cudnn_attention_workspace_bytes in exec/activation_accounting.h,
// which the planner counts): the backward's fp32 buffers that the graph names (rowsum(dO*O), B*NH*T floats; without
// --deterministic the fp32 dQ accumulator, B*NH*T*HS floats) followed by the engines' own workspace, at most
// kCudnnAttentionEngineWorkspaceBytes (deterministic: plus B*NH*T^2 bf16 elements, T rounded up to 128, for the dP
// buffer of cuDNN's deterministic Hopper backward). An engine configuration wanting more is skipped.
//
// Deterministic (--deterministic): the graph variant cudnn-frontend builds for it on Hopper (dQ written straight by
// the dS*K matmul, no fp32 accumulator: the "dP workspace" kernels), and only engine configurations without
// cuDNN's NONDETERMINISTIC numerical note; none: supported() says so and the caller uses our kernels.
//
// When cuDNN refuses a graph, why is in its log: run with CUDNN_LOGLEVEL_DBG=2 CUDNN_LOGDEST_DBG=stderr (3 adds
// every API call); supported()'s reason names the direction, the engine configurations tried and the statuses.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <cuda_runtime.h>

#include "exec/exec_config.h"

namespace zeroplan::exec::cuda {

struct CudnnAttentionShape {
  int B = 0, T = 0, NH = 0, NKV = 0, HS = 0;
  ExecPrecision precision = ExecPrecision::bf16;
  bool operator==(const CudnnAttentionShape& o) const {  // CUDA sources are C++17: no defaulted comparison
    return B == o.B && T == o.T && NH == o.NH && NKV == o.NKV && HS == o.HS && precision == o.precision;
  }
  std::string describe() const;
};

class CudnnAttention {
 public:
  // The handle is bound to `stream` (on the current device); every call runs on it.
  CudnnAttention(cudaStream_t stream, bool deterministic);
  ~CudnnAttention();
  CudnnAttention(const CudnnAttention&) = delete;
  CudnnAttention& operator=(const CudnnAttention&) = delete;

  // The workspace bytes a shape needs (exec/activation_accounting.h cudnn_attention_workspace_bytes).
  static std::int64_t workspace_bytes(const CudnnAttentionShape& s, bool deterministic);
  // The caller's workspace, used by every later call (device memory it allocated and accounts for; 256-aligned).
  void set_workspace(void* workspace, std::int64_t bytes);

  // Builds the forward and backward plans of the shape (the first time; later calls look them up): false, with the
  // reason in *why, when the type is not 16-bit, T is not a multiple of 128 (cuDNN 9.14's backward needs a padding
  // mask otherwise), or cuDNN offers no engine for either graph (within the workspace; deterministic under
  // --deterministic). Throws only on a failed CUDA/cuDNN call outside plan building.
  bool supported(const CudnnAttentionShape& s, std::string* why = nullptr);
  // out and lse from qkv; dqkv (every element written) from dout, qkv, out and lse. The shape must be supported().
  void forward(const CudnnAttentionShape& s, void* out, float* lse, const void* qkv);
  void backward(const CudnnAttentionShape& s, void* dqkv, const void* dout, const void* qkv, const void* out,
                const float* lse);

  // What was planned for a supported shape (tests and the benchmark): the execution plans' identities (the same
  // objects on every call), cuDNN's global engine indices and their workspace bytes.
  struct PlanInfo {
    const void* forward_plan = nullptr;
    const void* backward_plan = nullptr;
    std::int64_t forward_engine = -1, backward_engine = -1;
    std::int64_t forward_workspace = 0, backward_workspace = 0;
  };
  PlanInfo plan_info(const CudnnAttentionShape& s) const;
  std::size_t planned_shapes() const { return plans_.size(); }
  bool deterministic() const { return deterministic_; }

  struct Graph;  // one direction's operation graph and plan (cudnn_attention.cu)
  struct Plan;   // one shape's two directions, or why cuDNN refused it

 private:
  Plan* find(const CudnnAttentionShape& s) const;
  Plan& plan(const CudnnAttentionShape& s);
  void execute(Graph& g, const std::vector<const void*>& pointers, void* workspace);
  cudaStream_t stream_;
  bool deterministic_;
  void* handle_ = nullptr;  // cudnnHandle_t (kept out of this header so that C++ files may include it)
  void* workspace_ = nullptr;
  std::int64_t workspace_bytes_ = 0;
  std::vector<std::unique_ptr<Plan>> plans_;
};

}  // namespace zeroplan::exec::cuda
