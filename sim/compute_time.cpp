#include "sim/compute_time.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <utility>

#include "core/input_error.h"

namespace zeroplan {

ComputeTimer::ComputeTimer(const ClusterDescription& cluster, Precision precision) {
  peak_flops_ = cluster.peak_flops(to_string(precision));
  if (!(peak_flops_ > 0.0)) {
    throw InputError(cluster.source, "peak_flops_" + to_string(precision),
                     "expected the GPU's dense peak FLOP/s for " + to_string(precision) + " (> 0) to time compute");
  }
  hbm_bandwidth_ = cluster.hbm_bandwidth;
  if (!(hbm_bandwidth_ > 0.0)) {
    throw InputError(cluster.source, "hbm_bandwidth", "expected the GPU memory bandwidth in bytes/s (> 0)");
  }
  std::vector<std::pair<double, double>> points;
  for (const GemmEfficiencyPoint& point : cluster.gemm_efficiency) {
    if (!(point.flops > 0.0) || !(point.efficiency > 0.0) || point.efficiency > 1.0) {
      throw InputError(cluster.source, "gemm_efficiency",
                       "expected points with flops > 0 and 0 < efficiency <= 1");
    }
    points.emplace_back(std::log(point.flops), point.efficiency);
  }
  std::sort(points.begin(), points.end());
  for (const auto& [log_flops, efficiency] : points) {
    log_flops_.push_back(log_flops);
    efficiency_.push_back(efficiency);
  }
}

double ComputeTimer::gemm_efficiency(double flops) const {
  if (log_flops_.empty()) return 1.0;  // no table: the loader supplies the default curve for files
  const double x = std::log(std::max(flops, 1.0));
  if (x <= log_flops_.front()) return efficiency_.front();
  if (x >= log_flops_.back()) return efficiency_.back();
  std::size_t i = 1;
  while (log_flops_[i] < x) ++i;
  const double w = (x - log_flops_[i - 1]) / (log_flops_[i] - log_flops_[i - 1]);
  return efficiency_[i - 1] + w * (efficiency_[i] - efficiency_[i - 1]);
}

double ComputeTimer::gemm_seconds(double flops) const {
  if (flops <= 0.0) return 0.0;
  return flops / (peak_flops_ * gemm_efficiency(flops));
}

double ComputeTimer::memory_seconds(double bytes) const { return bytes > 0.0 ? bytes / hbm_bandwidth_ : 0.0; }

namespace {

// Forward and backward of one GEMM (2*M*N*K FLOPs): backward = input gradient + weight gradient, each a GEMM of
// the same size (so the same efficiency).
struct GemmWork {
  double forward_seconds = 0.0;
  double flops = 0.0;
};

void add_gemm(const ComputeTimer& timer, double flops, GemmWork& work) {
  work.forward_seconds += timer.gemm_seconds(flops);
  work.flops += flops;
}

LayerCompute transformer_block(const ComputeTimer& timer, const TransformerShape& shape,
                               const TrainingConfig& training) {
  const double e = precision_bytes(training.precision);
  const double tokens = static_cast<double>(training.micro_batch) * static_cast<double>(training.seq_len);
  const double s = static_cast<double>(training.seq_len);
  const double h = static_cast<double>(shape.hidden);
  const double kv = static_cast<double>(shape.kv_dim());
  const double ffn = static_cast<double>(shape.ffn_hidden);
  const bool swiglu = shape.activation == ActivationKind::swiglu;

  // Weight GEMMs (2 FLOPs per multiply-add): q/k/v projection, attention output, MLP (gate and up for SwiGLU).
  GemmWork weights;
  add_gemm(timer, 2.0 * tokens * h * (h + 2.0 * kv), weights);
  add_gemm(timer, 2.0 * tokens * h * h, weights);
  add_gemm(timer, 2.0 * tokens * h * ffn, weights);
  if (swiglu) add_gemm(timer, 2.0 * tokens * h * ffn, weights);
  add_gemm(timer, 2.0 * tokens * ffn * h, weights);
  // Attention core: Q K^T and scores x V, 2 * s * h FLOPs per token each (PaLM's 12 L h s over fwd+bwd), one
  // batched call whose size sets its efficiency.
  GemmWork attention;
  add_gemm(timer, 4.0 * tokens * s * h, attention);

  // Memory-bound forward work, bytes over HBM: two norms (read + write h per token), the activation (GELU:
  // read + write ffn; SwiGLU: read gate and up, write one), two residual adds (read 2h, write h), rotary
  // embedding on q and k (llama), dropout (read + write h and a 1-byte mask, three per block) when on.
  double forward_bytes = 2.0 * 2.0 * tokens * h * e;
  forward_bytes += (swiglu ? 3.0 : 2.0) * tokens * ffn * e;
  forward_bytes += 2.0 * 3.0 * tokens * h * e;
  if (shape.family == ModelFamily::llama) forward_bytes += 2.0 * tokens * (h + kv) * e;
  if (shape.dropout > 0.0) forward_bytes += 3.0 * tokens * h * (2.0 * e + 1.0);
  const double forward_memory_seconds = timer.memory_seconds(forward_bytes);

  LayerCompute layer;
  layer.forward_seconds = weights.forward_seconds + attention.forward_seconds + forward_memory_seconds;
  layer.forward_flops = weights.flops + attention.flops;
  // Backward: input gradient of every GEMM (incl. attention core, whose weights are activations: both of its
  // backward GEMMs are input gradients) and the memory-bound backward (about twice the forward's bytes: read
  // the saved input and the incoming gradient, write the outgoing one); weight gradients of the weight GEMMs.
  layer.backward_input_seconds =
      weights.forward_seconds + 2.0 * attention.forward_seconds + 2.0 * forward_memory_seconds;
  layer.backward_weight_seconds = weights.forward_seconds;
  layer.backward_flops = 2.0 * layer.forward_flops;
  switch (training.checkpointing) {
    case Checkpointing::none:
      break;
    case Checkpointing::selective:  // Korthikanti et al. 2022: only the attention core is recomputed
      layer.recompute_seconds = attention.forward_seconds;
      layer.recompute_flops = attention.flops;
      break;
    case Checkpointing::full:  // the whole block's forward again (zero-formulas.md section 6: +1 forward)
      layer.recompute_seconds = layer.forward_seconds;
      layer.recompute_flops = layer.forward_flops;
      break;
  }
  return layer;
}

// A norm over h per token: read + write; backward about twice.
LayerCompute norm_layer(const ComputeTimer& timer, double tokens, double h, double e) {
  LayerCompute layer;
  layer.forward_seconds = timer.memory_seconds(2.0 * tokens * h * e);
  layer.backward_input_seconds = 2.0 * layer.forward_seconds;
  return layer;
}

// The output projection (logits = x W^T over the vocabulary) and the loss: the GEMM 2 * tokens * h * V, then
// the cross-entropy, memory-bound over the logits: forward writes the 16-bit logits, upcasts them (read 16-bit,
// write fp32 when the loss is fp32) and reads them for log-softmax; backward reads them and writes the 16-bit
// gradient (fused cross-entropy writes it in place: one fewer pass).
void add_output_head(const ComputeTimer& timer, const TransformerShape& shape, const TrainingConfig& training,
                     LayerCompute& layer) {
  const double e = precision_bytes(training.precision);
  const double tokens = static_cast<double>(training.micro_batch) * static_cast<double>(training.seq_len);
  const double h = static_cast<double>(shape.hidden);
  const double v = static_cast<double>(shape.vocab_size);
  const double flops = 2.0 * tokens * h * v;
  const double gemm = timer.gemm_seconds(flops);
  const double loss_dtype = training.fp32_loss ? 4.0 : e;
  double forward_bytes = tokens * v * (e + loss_dtype);
  if (training.fp32_loss) forward_bytes += tokens * v * e;  // the upcast reads the 16-bit logits
  const double backward_bytes = tokens * v * (loss_dtype + (training.fused_cross_entropy ? 0.0 : e));
  layer.forward_seconds += gemm + timer.memory_seconds(forward_bytes);
  layer.forward_flops += flops;
  layer.backward_input_seconds += gemm + timer.memory_seconds(backward_bytes);
  layer.backward_weight_seconds += gemm;
  layer.backward_flops += 2.0 * flops;
}

}  // namespace

std::vector<LayerCompute> layer_compute_times(const ModelDescription& model, const ClusterDescription& cluster,
                                              const TrainingConfig& training) {
  const ComputeTimer timer(cluster, training.precision);
  std::vector<LayerCompute> times(model.layers.size());
  const double b = static_cast<double>(training.micro_batch);
  const double e = precision_bytes(training.precision);

  if (!model.transformer) {
    for (std::size_t i = 0; i < model.layers.size(); ++i) {
      const LayerDescription& layer = model.layers[i];
      // A dense layer's forward is 2 FLOPs per parameter per sample when the description gives no count.
      const double per_sample = layer.forward_flops_per_sample > 0.0 ? layer.forward_flops_per_sample
                                                                       : 2.0 * static_cast<double>(layer.params);
      const double flops = per_sample * b;
      LayerCompute& t = times[i];
      t.forward_seconds = timer.gemm_seconds(flops);
      t.forward_flops = flops;
      t.backward_input_seconds = t.forward_seconds;
      t.backward_weight_seconds = t.forward_seconds;
      t.backward_flops = 2.0 * flops;
      if (training.checkpointing == Checkpointing::full) {
        t.recompute_seconds = t.forward_seconds;
        t.recompute_flops = flops;
      }
    }
    return times;
  }

  const TransformerShape& shape = *model.transformer;
  const double tokens = b * static_cast<double>(training.seq_len);
  const double h = static_cast<double>(shape.hidden);
  const LayerCompute block = transformer_block(timer, shape, training);  // every block has the same shape
  bool has_head = false;
  for (std::size_t i = 0; i < model.layers.size(); ++i) {
    const LayerDescription& layer = model.layers[i];
    LayerCompute& t = times[i];
    if (layer.kind == "transformer_block") {
      t = block;
    } else if (layer.kind == "embedding") {
      // Token (and position) lookup: read the rows and write the hidden states; backward scatters the
      // gradient rows into the embedding gradient (read + write).
      const double tables = shape.learned_positions ? 2.0 : 1.0;
      t.forward_seconds = timer.memory_seconds((tables + 1.0) * tokens * h * e);
      t.backward_weight_seconds = timer.memory_seconds(2.0 * tables * tokens * h * e);
      if (shape.embedding_norm) {
        const LayerCompute norm = norm_layer(timer, tokens, h, e);
        t.forward_seconds += norm.forward_seconds;
        t.backward_input_seconds += norm.backward_input_seconds;
      }
    } else if (layer.kind == "norm") {
      t = norm_layer(timer, tokens, h, e);
    } else if (layer.kind == "lm_head") {
      add_output_head(timer, shape, training, t);
      has_head = true;
    } else {
      throw InputError(model.source, "layers[" + std::to_string(i) + "].kind",
                       "'" + layer.kind + "' in a transformer; expected embedding, transformer_block, norm or "
                       "lm_head");
    }
  }
  // Tied embeddings: the output projection reuses the embedding matrix and belongs to no layer of its own; it
  // runs right after the last layer (the final norm).
  if (!has_head && !times.empty()) add_output_head(timer, shape, training, times.back());
  return times;
}

double optimizer_step_bytes_per_param(const TrainingConfig& training) {
  const double states = optimizer_state_bytes_per_param(training.optimizer);
  const double e = precision_bytes(training.precision);
  const double gradient_norm_read = 4.0;  // fp32 gradient read once more for the norm / overflow check
  if (training.precision == Precision::fp32) {
    // No master copy: read param, states, gradient; write param and states.
    return 4.0 + states + 4.0 + 4.0 + states + gradient_norm_read;
  }
  // Mixed precision: read fp32 master + states + fp32 gradient, write master + states + the 16-bit param.
  return (4.0 + states + 4.0) + (4.0 + states + e) + gradient_norm_read;
}

double model_flops_per_token(const ModelDescription& model, const TrainingConfig& training) {
  if (model.transformer) {
    const TransformerShape& shape = *model.transformer;
    // PaLM appendix B: 6N + 12 * L * h * s (attention matmuls, causal mask not discounted).
    return 6.0 * static_cast<double>(model.params()) + 12.0 * static_cast<double>(shape.layers) *
                                                           static_cast<double>(shape.hidden) *
                                                           static_cast<double>(training.seq_len);
  }
  double forward = 0.0;
  for (const LayerDescription& layer : model.layers) {
    forward += layer.forward_flops_per_sample > 0.0 ? layer.forward_flops_per_sample
                                                    : 2.0 * static_cast<double>(layer.params);
  }
  return 3.0 * forward;
}

}  // namespace zeroplan
