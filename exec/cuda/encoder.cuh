// Token + position embedding: out[b,t,:] = wte[token[b,t],:] + wpe[t,:] (wpe null: rotary models, the token row
// alone), and its backward (dwpe null likewise) (dwte by atomic adds
// of 16-byte-aligned pairs, or in a fixed order from the positions of each token; dwpe by a per-position sum
// over the batch).
#pragma once

#include <cstdint>
#include <vector>

#include <cuda_runtime.h>

namespace zeroplan::exec::cuda {

template <typename T>
void encoder_forward(T* out, const int* tokens, const T* wte, const T* wpe, int B, int Tn, int C, cudaStream_t stream);

// Where each token occurs in a micro-batch, for the deterministic dwte: the distinct tokens, and for the i-th of
// them its positions (b*T + t, increasing) at positions[offsets[i] .. offsets[i+1]). Built on the host from the
// token ids the trainer copies to the device anyway (llm.c's deterministic encoder backward does the same
// bucketing, train_gpt2.cu encoder_backward).
struct TokenPositions {
  std::vector<int> tokens;     // distinct, increasing
  std::vector<int> offsets;    // tokens.size() + 1
  std::vector<int> positions;  // B*T
  void build(const int* ids, std::int64_t count);
};
// TokenPositions' arrays on the device.
struct DeviceTokenPositions {
  const int* tokens = nullptr;
  const int* offsets = nullptr;
  const int* positions = nullptr;
  int distinct = 0;
};

// dwte accumulates (the logits GEMM wrote it first): by atomic adds, or, with `ordered` (--deterministic), each
// token's row summed over its positions in increasing order in fp32 and added once (the same bits on every
// run). dwpe accumulates when `accumulate`, else is overwritten (a fixed-order sum either way).
template <typename T>
void encoder_backward(T* dwte, T* dwpe, const T* dout, const int* tokens, int B, int Tn, int C, bool accumulate,
                      const DeviceTokenPositions* ordered, cudaStream_t stream);

}  // namespace zeroplan::exec::cuda
