// Compute time of each layer for one micro-step: GEMMs from their FLOPs at a rate that depends on the GEMM's
// size (ClusterDescription::gemm_efficiency, interpolated in log(FLOPs)), memory-bound operations (norms,
// activations, residual adds, the loss) from the bytes they move over HBM bandwidth.
// FLOP counts (zero-formulas.md section 6, PaLM appendix B): a dense layer's forward is 2 FLOPs per parameter
// per token; attention's score and value matmuls add 2 * 2 * s * h per token per layer (causal mask not
// discounted); backward is twice the forward, half for the input gradient and half for the weight gradient.
#pragma once

#include <vector>

#include "core/cluster_description.h"
#include "core/model_description.h"
#include "core/training_config.h"

namespace zeroplan {

// One layer's GPU work for one micro-step, in seconds and FLOPs.
struct LayerCompute {
  double forward_seconds = 0.0;
  double backward_input_seconds = 0.0;   // input gradient (dgrad) and the memory-bound backward work
  double backward_weight_seconds = 0.0;  // weight gradient (wgrad)
  double recompute_seconds = 0.0;        // forward work re-run under activation checkpointing (0 when off)
  double forward_flops = 0.0;
  double backward_flops = 0.0;
  double recompute_flops = 0.0;
};

class ComputeTimer {
 public:
  // peak = the cluster's dense peak for the precision; efficiency table from the cluster (empty: the peak).
  ComputeTimer(const ClusterDescription& cluster, Precision precision);

  double peak_flops() const { return peak_flops_; }
  // Achievable fraction of peak for one GEMM of `flops`, interpolated in log(flops), clamped at the ends.
  double gemm_efficiency(double flops) const;
  double gemm_seconds(double flops) const;
  // Memory-bound work: bytes moved over HBM.
  double memory_seconds(double bytes) const;

 private:
  double peak_flops_ = 0.0;
  double hbm_bandwidth_ = 0.0;
  std::vector<double> log_flops_;
  std::vector<double> efficiency_;
};

// Per-layer compute of one micro-step, in the order of model.layers. A tied output projection (no lm_head
// layer) and the loss run with the last layer. Throws InputError when the cluster has no peak for the
// precision or no HBM bandwidth.
std::vector<LayerCompute> layer_compute_times(const ModelDescription& model, const ClusterDescription& cluster,
                                              const TrainingConfig& training);

// Bytes the GPU optimizer step reads and writes per parameter it updates: AdamW under mixed precision reads the
// fp32 master, momentum and variance and the fp32 gradient, writes the master and states back and the 16-bit
// copy of the parameter; plus one read of the gradient for the norm (clipping / overflow check).
double optimizer_step_bytes_per_param(const TrainingConfig& training);

// Model FLOPs per token (PaLM appendix B): 6N + 12 * L * h * s for a transformer (N all parameters, s the
// training sequence length). A generic layer-list model has no tokens: its unit is the sample, and the figure is
// 3x its forward FLOPs per sample (forward + backward at 2x). Recompute is not model FLOPs (MFU, not HFU).
double model_flops_per_token(const ModelDescription& model, const TrainingConfig& training);

}  // namespace zeroplan
