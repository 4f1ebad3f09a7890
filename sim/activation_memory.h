// Activation memory per GPU at the peak of the backward pass: the activations saved for backward (per layer,
// with or without checkpointing), the largest per-layer backward working set, the final norm, and the
// logits/loss buffers. Source: Korthikanti et al. 2022 (arXiv 2205.05198) sec. 4, extended with what a real
// implementation stores beyond the paper's list (norm statistics, flash-attention softmax statistics); see
// zero-formulas.md sec. 4.
//
// The per-block term list (bytes per token; e = activation element bytes, 2 for fp16/bf16, 4 for fp32;
// h hidden, f MLP inner size, kv = key/value width, a heads, s sequence):
//   norm inputs + outputs        4 h e    (two norms: LN1/RMSNorm1 input = block input, its output = QKV
//                                          input; LN2 input = mid-block residual, its output = MLP input)
//   Q, K, V                      (h + 2 kv) e   (gpt2: 3 h e; the attention core's inputs)
//   attention output             h e      (input of the output projection)
//   MLP, GELU/ReLU               2 f e    (FC output = GELU input, GELU output = down-projection input)
//   MLP, SwiGLU                  3 f e    (gate, up, silu(gate)*up = down-projection input)
//   dropout masks (p > 0)        2 h      (1-byte masks after attention and MLP)
//   norm statistics              LayerNorm: 2 norms * (mean, rstd) * 4 B = 16; RMSNorm: 2 * rstd * 4 B = 8
//   attention core, unfused      a s e    (softmax output) + with dropout a s (mask) + a s e (dropout output)
//   attention core, fused        4 a      (flash attention keeps only the fp32 logsumexp per head and row)
// gpt2, f = 4h, e = 2, dropout, unfused: 34 h + 5 a s per token = Korthikanti's sbh(34 + 5as/h) per layer.
// gpt2, no dropout, fused: 32 h + 16 + 4 a per token: exactly what our executor stores (LN1 in 2, LN1 out 2,
// QKV 6, attention out 2, LN2 in 2, LN2 out 2, FC out 8, GELU out 8 sbh; LN mean/rstd; logsumexp).
#pragma once

#include <string>
#include <vector>

#include "core/model_description.h"
#include "core/training_config.h"
#include "core/units.h"
#include "sim/memory_inputs.h"

namespace zeroplan {

struct MemoryTerm;

// Bytes per token of one transformer block's saved activations, by term (the list above).
struct BlockActivationTerms {
  Bytes norm_inputs_outputs = 0;
  Bytes qkv = 0;
  Bytes attention_output = 0;
  Bytes mlp = 0;
  Bytes dropout_masks = 0;
  Bytes norm_statistics = 0;
  Bytes attention_core = 0;  // unfused softmax (+ dropout) or fused logsumexp
  Bytes total() const {
    return norm_inputs_outputs + qkv + attention_output + mlp + dropout_masks + norm_statistics + attention_core;
  }
};

struct ActivationBytes {
  std::int64_t tokens = 0;          // s * b (transformers), micro-batch samples (layer lists)
  std::int64_t layers = 0;          // transformer blocks, or layers of a layer list
  BlockActivationTerms block_terms; // per token, without checkpointing (the full set of one block)
  Bytes block_saved = 0;            // one block's saved bytes under the checkpointing mode
  Bytes saved_layers = 0;           // all blocks' (layers') saved bytes
  Bytes recompute_live = 0;         // full checkpointing: one block's full set rebuilt during its backward
  Bytes backward_working_set = 0;   // the largest per-layer backward working set (gradient temporaries)
  // cuDNN's workspace while a convolution's backward runs (layer lists; MemoryInputs::convolution_workspace): one
  // block beside the working set, not one of the blocks the activations free for other requests.
  Bytes convolution_workspace = 0;
  Bytes embedding_dropout_mask = 0; // 1-byte mask on the embedding output when dropout > 0
  Bytes final_norm = 0;             // final norm input + output + statistics
  // zeroplan's executor at stages 2-3: the gradient partition's bytes past the blocks' MLP tensors it lies over
  // (MemoryInputs::executor_grads_beyond_activations)
  Bytes gradient_partition_beyond = 0;
  Bytes total = 0;                  // everything above: the activations component
  Bytes logits = 0;                 // logits, fp32 copy, their gradients (the logits component)
};

// Whether a plan's blocks are transformers' own eager Llama-family modules (modeling_llama.py / Mistral / Qwen2:
// LlamaRMSNorm, rotary embeddings, SwiGLU MLP) run under DeepSpeed: what they keep for backward
// (activation_bytes) and the kernels they launch (sim/compute_time.cpp) differ from the harness's fused modules.
bool transformers_llama_modules(const TransformerShape& shape, const TrainingConfig& training);

// Per-token bytes of one block's full saved set (no checkpointing) for a transformer shape.
BlockActivationTerms block_activation_terms(const TransformerShape& shape, const TrainingConfig& training,
                                            int activation_bytes);

ActivationBytes activation_bytes(const ModelDescription& model, const TrainingConfig& training,
                                 const MemoryInputs& in);

void explain_activations(const ModelDescription& model, const TrainingConfig& training, const MemoryInputs& in,
                         const ActivationBytes& bytes, std::vector<MemoryTerm>& terms);

}  // namespace zeroplan
