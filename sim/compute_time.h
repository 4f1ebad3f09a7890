// Compute time of each layer for one micro-step, from first principles: every kernel of a layer's forward and
// backward, timed by the resource that bounds it, at rates the cluster description carries (measured where the
// cluster says so, with provenance):
// - GEMMs: FLOPs / (peak * efficiency(FLOPs)), the efficiency interpolated in log(FLOPs) between the cluster's
//   gemm_efficiency points (measured at training shapes for h200x4; the zeroplan engine uses
//   executor_gemm_efficiency, its own cuBLASLt GEMMs, where the cluster has them). Biases are added in the GEMM
//   epilogue (cuBLASLt), not by a kernel of their own.
// - Fused (flash) attention: its own achievable rate (attention_forward_flops / attention_backward_flops),
//   applied to the work a causal kernel really does: half of the s^2 products (the masked half is skipped). The
//   FLOPs reported (and counted for MFU) follow PaLM appendix B and count all of them: 4*s*h per token forward,
//   8*s*h backward. Without fused attention: the score and value matmuls as batched GEMMs over all s^2 products
//   plus the softmax over the scores.
// - Memory-bound kernels: bytes / bandwidth + a fixed kernel_overhead_seconds per kernel. Elementwise kernels
//   (residual adds, GELU/SwiGLU, rotary, dropout, casts, embedding lookups, the optimizer step) stream at
//   streaming_bandwidth; row-reduction kernels (LayerNorm/RMSNorm forward and backward, norm-weight and bias
//   gradients reduced over tokens, softmax / cross-entropy) run at reduction_bandwidth. The byte list of each
//   kernel is written beside it in compute_time.cpp.
// FLOP counts (zero-formulas.md section 6, PaLM appendix B): a dense layer's forward is 2 FLOPs per parameter
// per token; backward twice the forward, half for the input gradient and half for the weight gradient.
// A layer-list model (a ResNet): each module's GEMM (convolution) on the curve with its own launch, and the
// memory-bound norm and activation kernels over the saved activations with their launches (compute_time.cpp).
#pragma once

#include <string>
#include <vector>

#include "core/cluster_description.h"
#include "core/model_description.h"
#include "core/training_config.h"

namespace zeroplan {

// One layer's GPU work for one micro-step, in seconds and FLOPs.
struct LayerCompute {
  double forward_seconds = 0.0;
  double backward_input_seconds = 0.0;   // input gradient (dgrad) and the memory-bound backward work
  double backward_weight_seconds = 0.0;  // weight gradient (wgrad), bias and norm-weight gradients
  double recompute_seconds = 0.0;        // forward work re-run under activation checkpointing (0 when off)
  double forward_flops = 0.0;
  double backward_flops = 0.0;
  double recompute_flops = 0.0;
};

class ComputeTimer {
 public:
  // peak = the cluster's dense peak for the precision; the rates from the cluster (see ClusterDescription; a
  // rate left at 0 falls back as the header of cluster_description.h says). Throws InputError when the cluster
  // has no peak for the precision or no HBM bandwidth.
  // engine zeroplan: attention at the executor's own measured rates where the cluster has them.
  ComputeTimer(const ClusterDescription& cluster, Precision precision,
               TrainingEngine engine = TrainingEngine::deepspeed);

  double peak_flops() const { return peak_flops_; }
  // Achievable fraction of peak for one GEMM of `flops`, interpolated in log(flops), clamped at the ends.
  double gemm_efficiency(double flops) const;
  double gemm_seconds(double flops) const;
  // Fused attention over `causal_work_flops` (the products a causal kernel computes). own_kernels: zeroplan's
  // executor running its own kernels (where cuDNN's fused attention is not offered), at their rates where the
  // cluster has them.
  double attention_forward_seconds(double causal_work_flops, bool own_kernels = false) const;
  double attention_backward_seconds(double causal_work_flops, bool own_kernels = false) const;
  // Memory-bound kernels: `kernels` launches moving `bytes` (read + write) in all.
  double streaming_seconds(double bytes, double kernels = 0.0) const;
  double reduction_seconds(double bytes, double kernels = 0.0) const;
  // PyTorch's eager elementwise kernels of transformers' Llama-family modules, `bytes` read + written in all, at the
  // cluster's eager_elementwise_bandwidth (measured with the kernels' own fixed time in it: no per-kernel term).
  double eager_elementwise_seconds(double bytes) const;

 private:
  double peak_flops_ = 0.0;
  double streaming_bandwidth_ = 0.0;
  double reduction_bandwidth_ = 0.0;
  double eager_elementwise_bandwidth_ = 0.0;
  double attention_forward_flops_ = 0.0;   // 0: the GEMM curve
  double attention_backward_flops_ = 0.0;
  double kernel_attention_forward_flops_ = 0.0;  // the executor's own kernels; 0: the rates above
  double kernel_attention_backward_flops_ = 0.0;
  double kernel_overhead_seconds_ = 0.0;
  std::vector<double> log_flops_;
  std::vector<double> efficiency_;
};

// transformers' eager Llama-family modules (sim/compute_time.cpp gives each kernel's bytes and its source): the bytes
// their elementwise kernels read and write, per LlamaRMSNorm over `elements` (tokens x hidden) and per decoder block
// over `tokens`, in the forward, the input gradient and the weight gradient (a trained norm's weight). e: the bytes
// of the model's 16-bit (or fp32) tensors. Timed at ComputeTimer::eager_elementwise_seconds.
struct EagerBlockBytes {
  double forward = 0.0, backward_input = 0.0, backward_weight = 0.0;
};
EagerBlockBytes eager_rms_norm_bytes(double elements, double e);
EagerBlockBytes eager_llama_block_bytes(const TransformerShape& shape, double tokens, double e);

// Per-layer compute of one micro-step, in the order of model.layers. A tied output projection (no lm_head
// layer) and the loss run with the last layer. Throws InputError when the cluster has no peak for the
// precision or no HBM bandwidth.
std::vector<LayerCompute> layer_compute_times(const ModelDescription& model, const ClusterDescription& cluster,
                                              const TrainingConfig& training);

// Bytes the GPU optimizer step moves per parameter it updates (all through streaming kernels):
// - mixed precision: the 16-bit gradient upcast into the fp32 gradient (read e, write 4); AdamW reads the fp32
//   master, momentum, variance and gradient (16) and writes master, momentum, variance and the 16-bit copy of the
//   parameter (12 + e); (SGD/8-bit Adam: their state bytes instead of 8);
// - fp32: no upcast and no 16-bit copy: read param, states, gradient; write param and states;
// - the gradient norm (clipping, overflow check): one more read of the fp32 gradient (4); with
//   gradient_clipping > 0 the clip scales it in place (read + write, 8).
// - autocast over fp32 parameters: the gradient accumulated into the fp32 .grad (e + 4), the step without a
//   16-bit copy (28 for AdamW) and the weights' cast to 16-bit in the next forward (4 + e).
// AdamW bf16 with clipping: 6 + 30 + 4 + 8 = 48 bytes per parameter (autocast: 6 + 28 + 6 + 12 = 52).
double optimizer_step_bytes_per_param(const TrainingConfig& training);
// zeroplan's executor (exec/cuda/adamw.cu): no fp32 gradient copy and no clipping pass. The global norm reads the
// model-precision gradient once (e; grad_norm_squared); one AdamW kernel reads gradient, fp32 master and states and
// writes master, states and the 16-bit parameter, the unscale and clip folded into its gradient scale (e + 4 + s +
// 4 + s + e). fp32: no master, the parameter read and written instead (4 + 4 + s + 4 + s). AdamW bf16: 2 + 28 = 30.
double executor_optimizer_step_bytes_per_param(const TrainingConfig& training);

// Model FLOPs per token (PaLM appendix B): 6N + 12 * L * h * s for a transformer (N all parameters, s the
// training sequence length). A generic layer-list model has no tokens: its unit is the sample, and the figure is
// 3x its forward FLOPs per sample (forward + backward at 2x). Recompute is not model FLOPs (MFU, not HFU).
double model_flops_per_token(const ModelDescription& model, const TrainingConfig& training);
// How model_flops_per_token counts them, for the reports beside an MFU.
std::string model_flops_convention(const ModelDescription& model, const TrainingConfig& training);

}  // namespace zeroplan
