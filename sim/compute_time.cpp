#include "sim/compute_time.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <string>
#include <utility>

#include "core/input_error.h"
#include "exec/activation_accounting.h"
#include "exec/network_plan.h"
#include "exec/zero/zero_buffer_layout.h"
#include "sim/activation_memory.h"
#include "sim/executor_layout.h"
#include "sim/lora_model.h"

namespace zeroplan {

ComputeTimer::ComputeTimer(const ClusterDescription& cluster, Precision precision, TrainingEngine engine) {
  peak_flops_ = cluster.peak_flops(to_string(precision));
  if (!(peak_flops_ > 0.0)) {
    throw InputError(cluster.source, "peak_flops_" + to_string(precision),
                     "expected the GPU's dense peak FLOP/s for " + to_string(precision) + " (> 0) to time compute");
  }
  if (!(cluster.hbm_bandwidth > 0.0)) {
    throw InputError(cluster.source, "hbm_bandwidth", "expected the GPU memory bandwidth in bytes/s (> 0)");
  }
  const auto rate = [&](double value, const char* field) {
    if (value < 0.0 || std::isnan(value)) {
      throw InputError(cluster.source, std::string("gpu.") + field, "expected a rate >= 0 (0: not given)");
    }
    return value;
  };
  // A rate not given (0) falls back to the datasheet HBM bandwidth (cluster_description.h).
  streaming_bandwidth_ = rate(cluster.streaming_bandwidth, "streaming_bandwidth");
  if (streaming_bandwidth_ == 0.0) streaming_bandwidth_ = cluster.hbm_bandwidth;
  eager_elementwise_bandwidth_ = rate(cluster.eager_elementwise_bandwidth, "eager_elementwise_bandwidth");
  if (eager_elementwise_bandwidth_ == 0.0) eager_elementwise_bandwidth_ = streaming_bandwidth_;
  reduction_bandwidth_ = rate(cluster.reduction_bandwidth, "reduction_bandwidth");
  if (reduction_bandwidth_ == 0.0) reduction_bandwidth_ = cluster.hbm_bandwidth;
  attention_forward_flops_ = rate(cluster.attention_forward_flops, "attention_forward_flops");
  attention_backward_flops_ = rate(cluster.attention_backward_flops, "attention_backward_flops");
  if (engine == TrainingEngine::zeroplan) {
    const double forward = rate(cluster.executor_attention_forward_flops, "executor_attention_forward_flops");
    const double backward = rate(cluster.executor_attention_backward_flops, "executor_attention_backward_flops");
    if (forward > 0.0) attention_forward_flops_ = forward;
    if (backward > 0.0) attention_backward_flops_ = backward;
    kernel_attention_forward_flops_ =
        rate(cluster.executor_kernel_attention_forward_flops, "executor_kernel_attention_forward_flops");
    kernel_attention_backward_flops_ =
        rate(cluster.executor_kernel_attention_backward_flops, "executor_kernel_attention_backward_flops");
  }
  if (kernel_attention_forward_flops_ == 0.0) kernel_attention_forward_flops_ = attention_forward_flops_;
  if (kernel_attention_backward_flops_ == 0.0) kernel_attention_backward_flops_ = attention_backward_flops_;
  kernel_overhead_seconds_ = rate(cluster.kernel_overhead_seconds, "kernel_overhead_seconds");
  // The attention rates are measured on 16-bit tensor cores; fp32 training runs attention at the fp32 peak's
  // share of them.
  if (precision == Precision::fp32 && cluster.peak_flops_bf16 > 0.0) {
    attention_forward_flops_ *= peak_flops_ / cluster.peak_flops_bf16;
    attention_backward_flops_ *= peak_flops_ / cluster.peak_flops_bf16;
    kernel_attention_forward_flops_ *= peak_flops_ / cluster.peak_flops_bf16;
    kernel_attention_backward_flops_ *= peak_flops_ / cluster.peak_flops_bf16;
  }
  // The zeroplan engine times its own executor's GEMMs where the cluster measured them (`zeroplan calibrate`);
  // DeepSpeed and the ideal engine run PyTorch's.
  const std::vector<GemmEfficiencyPoint>& curve =
      engine == TrainingEngine::zeroplan && !cluster.executor_gemm_efficiency.empty() ? cluster.executor_gemm_efficiency
                                                                                      : cluster.gemm_efficiency;
  std::vector<std::pair<double, double>> points;
  for (const GemmEfficiencyPoint& point : curve) {
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

double ComputeTimer::attention_forward_seconds(double causal_work_flops, bool own_kernels) const {
  if (causal_work_flops <= 0.0) return 0.0;
  const double rate = own_kernels ? kernel_attention_forward_flops_ : attention_forward_flops_;
  return rate > 0.0 ? causal_work_flops / rate : gemm_seconds(causal_work_flops);
}

double ComputeTimer::attention_backward_seconds(double causal_work_flops, bool own_kernels) const {
  if (causal_work_flops <= 0.0) return 0.0;
  const double rate = own_kernels ? kernel_attention_backward_flops_ : attention_backward_flops_;
  return rate > 0.0 ? causal_work_flops / rate : gemm_seconds(causal_work_flops);
}

double ComputeTimer::streaming_seconds(double bytes, double kernels) const {
  return kernels * kernel_overhead_seconds_ + (bytes > 0.0 ? bytes / streaming_bandwidth_ : 0.0);
}

double ComputeTimer::eager_elementwise_seconds(double bytes) const {
  return bytes > 0.0 ? bytes / eager_elementwise_bandwidth_ : 0.0;
}

double ComputeTimer::reduction_seconds(double bytes, double kernels) const {
  return kernels * kernel_overhead_seconds_ + (bytes > 0.0 ? bytes / reduction_bandwidth_ : 0.0);
}

namespace {

// What every layer's time is made of, split the way the timeline schedules it.
struct Work {
  double forward = 0.0, backward_input = 0.0, backward_weight = 0.0;
};

// Norm over h per token (LayerNorm / RMSNorm; PyTorch's vectorized_layer_norm_kernel and its backward):
// forward reads x and writes y (2 h e per token, one row-reduction kernel); the input gradient reads dy and x and
// writes dx (3 h e); the weight (and bias) gradient reads dy and x again and reduces over the tokens (2 h e).
void add_norm(const ComputeTimer& timer, double tokens, double h, double e, Work& work) {
  work.forward += timer.reduction_seconds(2.0 * tokens * h * e, 1.0);
  work.backward_input += timer.reduction_seconds(3.0 * tokens * h * e, 1.0);
  work.backward_weight += timer.reduction_seconds(2.0 * tokens * h * e, 1.0);
}

// The harness's and zeroplan's executor's blocks: their elementwise work around the GEMMs and the attention core.
void add_fused_block_elementwise(const ComputeTimer& timer, const TransformerShape& shape,
                                 const TrainingConfig& training, double tokens, Work& work) {
  const double e = precision_bytes(training.precision);
  const double h = static_cast<double>(shape.hidden);
  const double kv = static_cast<double>(shape.kv_dim());
  const double ffn = static_cast<double>(shape.ffn_hidden);
  const bool swiglu = shape.activation == ActivationKind::swiglu;
  // Memory-bound kernels, bytes per token (e = activation bytes; r = the residual stream's and the norms'
  // bytes: e, or 4 under autocast over fp32 parameters, where LayerNorm runs in fp32):
  const double r = training.autocast_fp32_params ? 4.0 : e;
  add_norm(timer, tokens, h, r, work);  // the attention norm
  add_norm(timer, tokens, h, r, work);  // the MLP norm
  // zeroplan's executor fuses the elementwise work around its GEMMs (exec/cuda/cuda_trainer.cu): the residual
  // add and the GELU into the cuBLASLt epilogues of the projections (matmul.cuh forward's residual, forward_gelu),
  // the GELU backward into the input-gradient GEMM's (backward_input_dgelu), and each branch's input gradient into
  // the LayerNorm backward that writes the residual stream's (dinp +=). A fused op costs the bytes it adds to its
  // host kernel, not a kernel of its own.
  const bool fused = training.engine == TrainingEngine::zeroplan;
  if (fused) {
    // Epilogue: read the residual (e h) per add; LayerNorm backward: read the stream's gradient once more (e h).
    work.forward += timer.streaming_seconds(2.0 * e * tokens * h, 0.0);
    work.backward_input += timer.streaming_seconds(2.0 * e * tokens * h, 0.0);
  } else {
    // Two residual adds: read the stream and the branch output, write the sum ((2 r + e) h each); backward adds
    // each branch's input gradient into the residual stream's (3 r h each).
    work.forward += timer.streaming_seconds(2.0 * (2.0 * r + e) * tokens * h, 2.0);
    work.backward_input += timer.streaming_seconds(2.0 * 3.0 * tokens * h * r, 2.0);
  }
  // Autocast: the fp32 norm outputs are cast to 16-bit before the q/k/v and MLP GEMMs (read 4, write e), and
  // those GEMMs' input gradients cast back to fp32 for the norm backward.
  if (training.autocast_fp32_params) {
    work.forward += timer.streaming_seconds(2.0 * (4.0 + e) * tokens * h, 2.0);
    work.backward_input += timer.streaming_seconds(2.0 * (4.0 + e) * tokens * h, 2.0);
  }
  // Activation: GELU/ReLU reads and writes f (2 f e), backward reads dy and x and writes dx (3 f e). SwiGLU
  // reads gate and up and writes their product (3 f e), backward reads dy, gate, up and writes both gradients
  // (5 f e).
  if (fused && !swiglu) {
    // GELU epilogue: the pre-GELU output written beside the GELU output (f e); DGELU epilogue: it is read (f e).
    work.forward += timer.streaming_seconds(tokens * ffn * e, 0.0);
    work.backward_input += timer.streaming_seconds(tokens * ffn * e, 0.0);
  } else {
    work.forward += timer.streaming_seconds((swiglu ? 3.0 : 2.0) * tokens * ffn * e, 1.0);
    work.backward_input += timer.streaming_seconds((swiglu ? 5.0 : 3.0) * tokens * ffn * e, 1.0);
  }
  // Rotary embedding (llama) on q and k: read + write (h + kv) each way.
  if (shape.family == ModelFamily::llama) {
    work.forward += timer.streaming_seconds(2.0 * tokens * (h + kv) * e, 1.0);
    work.backward_input += timer.streaming_seconds(2.0 * tokens * (h + kv) * e, 1.0);
  }
  // Dropout after the attention output and the MLP and on the residual (three per block): read h, write h and
  // a 1-byte mask; backward reads dy and the mask, writes dx.
  if (shape.dropout > 0.0) {
    work.forward += timer.streaming_seconds(3.0 * tokens * h * (2.0 * e + 1.0), 3.0);
    work.backward_input += timer.streaming_seconds(3.0 * tokens * h * (2.0 * e + 1.0), 3.0);
  }
}

void add_bias_gradients(const ComputeTimer& timer, const TransformerShape& shape, const TrainingConfig& training,
                        double tokens, Work& work) {
  const double e = precision_bytes(training.precision);
  const double h = static_cast<double>(shape.hidden);
  const double kv = static_cast<double>(shape.kv_dim());
  const double ffn = static_cast<double>(shape.ffn_hidden);
  const bool swiglu = shape.activation == ActivationKind::swiglu;
  // Bias gradients: each biased linear layer's output gradient summed over the tokens (read tokens x out).
  double bias_outputs = 0.0, biased_layers = 0.0;
  if (shape.attention_bias) {
    bias_outputs += h + 2.0 * kv;
    biased_layers += 1.0;
    if (shape.attention_output_bias) {
      bias_outputs += h;
      biased_layers += 1.0;
    }
  }
  if (shape.mlp_bias) {
    bias_outputs += (swiglu ? 2.0 : 1.0) * ffn + h;
    biased_layers += swiglu ? 3.0 : 2.0;
  }
  work.backward_weight += timer.reduction_seconds(tokens * bias_outputs * e, biased_layers);
}

LayerCompute transformer_block(const ComputeTimer& timer, const TransformerShape& shape,
                               const TrainingConfig& training) {
  const double e = precision_bytes(training.precision);
  const double tokens = static_cast<double>(training.micro_batch) * static_cast<double>(training.seq_len);
  const double s = static_cast<double>(training.seq_len);
  const double h = static_cast<double>(shape.hidden);
  const double kv = static_cast<double>(shape.kv_dim());
  const double a = static_cast<double>(shape.heads);
  const double ffn = static_cast<double>(shape.ffn_hidden);
  const bool swiglu = shape.activation == ActivationKind::swiglu;

  // Weight GEMMs (2 FLOPs per multiply-add): q/k/v projection, attention output, MLP (gate and up for SwiGLU),
  // MLP down projection. Forward, input gradient and weight gradient are GEMMs of the same FLOPs.
  double gemm_seconds = 0.0, gemm_flops = 0.0;
  for (double flops : {2.0 * tokens * h * (h + 2.0 * kv), 2.0 * tokens * h * h, 2.0 * tokens * h * ffn,
                       swiglu ? 2.0 * tokens * h * ffn : 0.0, 2.0 * tokens * ffn * h}) {
    gemm_seconds += timer.gemm_seconds(flops);
    gemm_flops += flops;
  }

  // Attention core: Q K^T and P V, 2 * s * h FLOPs per token each as PaLM counts them (12 L h s over forward and
  // backward). A causal flash kernel skips the masked half; its backward recomputes Q K^T and computes dV, dP,
  // dQ, dK: 5 products against the forward's 2.
  const double attention_flops = 4.0 * tokens * s * h;
  double attention_forward = 0.0, attention_backward = 0.0;
  if (training.fused_attention) {
    const double causal_work = attention_flops / 2.0;
    // zeroplan's executor runs cuDNN's fused attention where it is offered, else its own kernels (the same test
    // as the trainer's: exec/activation_accounting.h); other engines' runs are timed at the cluster's rates.
    const bool own_kernels =
        training.engine == TrainingEngine::zeroplan &&
        !exec::cudnn_attention_offered(training.precision != Precision::fp32, training.seq_len, shape.head_dim(),
                                       training.deterministic);
    attention_forward = timer.attention_forward_seconds(causal_work, own_kernels);
    attention_backward = timer.attention_backward_seconds(2.5 * causal_work, own_kernels);
  } else {
    // Unfused: batched GEMMs over every product, plus the softmax over the a*s scores of each token (forward
    // reads and writes them, backward reads probabilities and their gradient and writes the score gradient).
    const double scores = tokens * a * s;
    attention_forward = timer.gemm_seconds(attention_flops) + timer.reduction_seconds(2.0 * scores * e, 1.0);
    attention_backward = 2.0 * timer.gemm_seconds(attention_flops) + timer.reduction_seconds(3.0 * scores * e, 1.0);
    if (shape.dropout > 0.0) {  // dropout on the probabilities: write the 1-byte mask and the dropped copy
      attention_forward += timer.streaming_seconds(scores * (2.0 * e + 1.0), 1.0);
      attention_backward += timer.streaming_seconds(scores * (2.0 * e + 1.0), 1.0);
    }
  }

  Work work;
  work.forward = gemm_seconds + attention_forward;
  work.backward_input = gemm_seconds + attention_backward;
  work.backward_weight = gemm_seconds;
  if (transformers_llama_modules(shape, training)) {
    const EagerBlockBytes eager = eager_llama_block_bytes(shape, tokens, e);
    work.forward += timer.eager_elementwise_seconds(eager.forward);
    work.backward_input += timer.eager_elementwise_seconds(eager.backward_input);
    work.backward_weight += timer.eager_elementwise_seconds(eager.backward_weight);
  } else {
    add_fused_block_elementwise(timer, shape, training, tokens, work);
  }
  add_bias_gradients(timer, shape, training, tokens, work);

  LayerCompute layer;
  layer.forward_seconds = work.forward;
  layer.backward_input_seconds = work.backward_input;
  layer.backward_weight_seconds = work.backward_weight;
  layer.forward_flops = gemm_flops + attention_flops;
  layer.backward_flops = 2.0 * layer.forward_flops;
  switch (training.checkpointing) {
    case Checkpointing::none:
      break;
    case Checkpointing::selective:
      if (training.engine == TrainingEngine::zeroplan) {
        // zeroplan's executor rebuilds the two norm outputs and the activation function's output
        // (exec/exec_config.h ExecRecompute::selective): two norm forwards and one activation forward, as above.
        const double r = training.autocast_fp32_params ? 4.0 : e;
        layer.recompute_seconds = 2.0 * timer.reduction_seconds(2.0 * tokens * h * r, 1.0) +
                                  timer.streaming_seconds((swiglu ? 3.0 : 2.0) * tokens * ffn * e, 1.0);
      } else {  // Korthikanti et al. 2022: only the attention core is recomputed
        layer.recompute_seconds = attention_forward;
        layer.recompute_flops = attention_flops;
      }
      break;
    case Checkpointing::full:  // the whole block's forward again (zero-formulas.md section 6: +1 forward)
      layer.recompute_seconds = layer.forward_seconds;
      layer.recompute_flops = layer.forward_flops;
      break;
  }
  return layer;
}

// The output projection (logits = x W^T over the vocabulary: forward, input-gradient and weight-gradient GEMMs
// of 2 * tokens * h * V FLOPs) and the loss over the logits, per logit element:
// - fp32 loss (HF / the PyTorch peer: cross_entropy(logits.float())): forward upcasts (read e, write 4) and
//   log-softmaxes (a row reduction: read 4, write 4); backward runs the softmax backward (read the gradient and
//   the output, write the input gradient: 12) and casts the gradient down (read 4, write e);
// - 16-bit loss: forward log-softmax (read e, write e), backward (3 e);
// - fused cross-entropy: forward reads the logits once (the log-sum-exp), backward writes the gradient in place
//   over them (read e, write e).
void add_output_head(const ComputeTimer& timer, const TransformerShape& shape, const TrainingConfig& training,
                     LayerCompute& layer) {
  const double e = precision_bytes(training.precision);
  const double tokens = static_cast<double>(training.micro_batch) * static_cast<double>(training.seq_len);
  const double h = static_cast<double>(shape.hidden);
  const double logits = tokens * static_cast<double>(shape.vocab_size);
  const double flops = 2.0 * tokens * h * static_cast<double>(shape.vocab_size);
  const double gemm = timer.gemm_seconds(flops);
  double forward = 0.0, backward = 0.0;
  if (training.fused_cross_entropy) {
    forward = timer.reduction_seconds(logits * e, 1.0);
    backward = timer.reduction_seconds(logits * 2.0 * e, 1.0);
  } else if (training.fp32_loss) {
    forward = timer.streaming_seconds(logits * (e + 4.0), 1.0) + timer.reduction_seconds(logits * 8.0, 1.0);
    backward = timer.reduction_seconds(logits * 12.0, 1.0) + timer.streaming_seconds(logits * (4.0 + e), 1.0);
  } else {
    forward = timer.reduction_seconds(logits * 2.0 * e, 1.0);
    backward = timer.reduction_seconds(logits * 3.0 * e, 1.0);
  }
  layer.forward_seconds += gemm + forward;
  layer.forward_flops += flops;
  layer.backward_input_seconds += gemm + backward;
  layer.backward_weight_seconds += gemm;
  layer.backward_flops += 2.0 * flops;
}

// zeroplan's executor on a layer-list model with ops (exec/cuda/cuda_network_trainer.cu): the kernels it launches
// for each op, each timed by the roofline of what bounds it, max(FLOPs / achieved GEMM rate, bytes / streaming
// bandwidth, the cluster's kernel_overhead_seconds). At ResNet-101 on CIFAR-10 sizes (feature maps of 16x16 down to
// 1x1, 0.5-8 MB per tensor at micro-batch 128) nearly every kernel is shorter than the fixed time of one kernel, so
// the count of kernels decides the step: the earlier form split each layer's FLOPs evenly over module_count (its
// BatchNorms counted as convolutions) and charged 1.5 kernels per module on top of the bytes, which put the
// 588-kernel forward at 3.65 ms and the 724-kernel backward at 6.21 ms where one H200 measured 2.58 and 4.47 ms
// (bench/resnet/results/2026-11-29-h200x1/call7/ours_s0.json). The floor is a maximum, not an addition: a kernel
// whose bytes take longer than the fixed time is bound by them alone. Kernels per op (and bytes, e = element bytes,
// n = elements of the op's output, per micro-batch):
// - conv2d: one cuDNN kernel per pass (exec/cuda/cudnn_conv.cu): forward, filter gradient, and the input gradient
//   unless the input is the network's images; each 2*B*Ho*Wo*K*C*R*S/groups FLOPs on the executor's GEMM curve,
//   reading the input and the filter and writing the output (or the matching operands backward). A filter larger
//   than 1x1 is transposed KCRS -> KRSC before the forward and the input gradient, and its gradient back after the
//   filter gradient (cuda_network_trainer.cu filter_krsc / filter_grad_to_kcrs): a read and a write of the filter.
// - batch_norm (exec/cuda/batchnorm.cu): forward the column partials (read x), the per-channel finish and the
//   normalize (read x, write y); backward the partials (read dy and x), the finish and the input gradient (read dy
//   and x, write dx).
// - relu: forward read + write; backward read the output and dy, write dx. add: forward read two, write one;
//   backward one copy per input gradient that is not the output's own (cuda_network_trainer.cu: the residual's).
// - max_pool2d: forward read the input, write the output and its int32 indices; backward the reverse.
//   adaptive_avg_pool2d: read the input, write C per sample, and back. flatten of a 1x1 map: a view.
// - linear: the forward GEMM (bias in its epilogue); backward the weight gradient, the bias gradient (a reduction
//   kernel) and the input gradient.
// The images' conversion to NHWC (read fp32, write e) runs with the first layer, the loss kernel (read and write the
// logits) with the last.
std::vector<LayerCompute> executor_network_times(const ComputeTimer& timer, const ModelDescription& model,
                                                 const TrainingConfig& training) {
  const double b = static_cast<double>(training.micro_batch);
  const double e = precision_bytes(training.precision);
  const auto kernel = [&](double bytes) { return timer.streaming_seconds(bytes, 0.0); };  // bytes only
  const double floor = timer.streaming_seconds(0.0, 1.0);                                 // one kernel's fixed time
  const auto memory_kernel = [&](double bytes) { return std::max(kernel(bytes), floor); };
  const auto gemm_kernel = [&](double flops, double bytes) {
    return std::max({timer.gemm_seconds(flops), kernel(bytes), floor});
  };
  std::map<std::string, TensorShape> shapes;
  shapes["input"] = *model.input_shape;
  const auto shape_of = [&](const std::string& name, std::size_t i) {
    const auto it = shapes.find(name);
    if (it == shapes.end())
      throw InputError(model.source, "layers[" + std::to_string(i) + "].ops", "reads '" + name + "' before it is written");
    return it->second;
  };
  std::vector<LayerCompute> times(model.layers.size());
  for (std::size_t i = 0; i < model.layers.size(); ++i) {
    const LayerDescription& layer = model.layers[i];
    LayerCompute& t = times[i];
    for (const LayerOp& op : layer.ops) {
      const TensorShape in = shape_of(op.inputs.front(), i);
      const double n_in = b * static_cast<double>(in.elements());
      // The output as the executor's network plan shapes it (exec/network_plan.h).
      const TensorShape out = exec::op_output_shape(op, in);
      switch (op.kind) {
        case LayerOpKind::conv2d: {
          const double filter = static_cast<double>(op.out_channels * (in.channels / op.groups) * op.kernel * op.kernel);
          const double n_out = b * static_cast<double>(out.elements());
          // 2 FLOPs per multiply-add: 2 * (B*Ho*Wo*K outputs) * (C/groups*R*S products each).
          const double flops = 2.0 * n_out * filter / static_cast<double>(op.out_channels);
          const double bytes = (n_in + filter + n_out) * e;
          const double transpose = op.kernel > 1 ? memory_kernel(2.0 * filter * e) : 0.0;
          t.forward_seconds += gemm_kernel(flops, bytes) + transpose;
          t.backward_weight_seconds += gemm_kernel(flops, bytes) + transpose;
          if (op.inputs.front() != "input") t.backward_input_seconds += gemm_kernel(flops, bytes) + transpose;
          if (op.bias) {
            t.forward_seconds += memory_kernel(2.0 * n_out * e);
            t.backward_weight_seconds += memory_kernel(n_out * e);
          }
          break;
        }
        case LayerOpKind::batch_norm: {
          const double n = n_in * e;
          t.forward_seconds += memory_kernel(n) + floor + memory_kernel(2.0 * n);
          t.backward_input_seconds += memory_kernel(2.0 * n) + floor + memory_kernel(3.0 * n);
          break;
        }
        case LayerOpKind::relu:
          t.forward_seconds += memory_kernel(2.0 * n_in * e);
          t.backward_input_seconds += memory_kernel(3.0 * n_in * e);
          break;
        case LayerOpKind::add:
          t.forward_seconds += memory_kernel(3.0 * n_in * e);
          t.backward_input_seconds += memory_kernel(2.0 * n_in * e);
          break;
        case LayerOpKind::max_pool2d: {
          const double n_out = b * static_cast<double>(out.elements());
          t.forward_seconds += memory_kernel(n_in * e + n_out * (e + 4.0));
          t.backward_input_seconds += memory_kernel(n_out * (e + 4.0) + n_in * e);
          break;
        }
        case LayerOpKind::adaptive_avg_pool2d:
          t.forward_seconds += memory_kernel((n_in + b * static_cast<double>(in.channels)) * e);
          t.backward_input_seconds += memory_kernel((n_in + b * static_cast<double>(in.channels)) * e);
          break;
        case LayerOpKind::flatten:
          if (in.height * in.width != 1) {  // a copy unless the map is 1x1 (a view)
            t.forward_seconds += memory_kernel(2.0 * n_in * e);
            t.backward_input_seconds += memory_kernel(2.0 * n_in * e);
          }
          break;
        case LayerOpKind::linear: {
          const double weights = static_cast<double>(op.in_features * op.out_features);
          const double flops = 2.0 * b * weights;
          const double bytes = (n_in + weights + b * static_cast<double>(op.out_features)) * e;
          t.forward_seconds += gemm_kernel(flops, bytes);
          t.backward_weight_seconds += gemm_kernel(flops, bytes);
          if (op.bias) t.backward_weight_seconds += memory_kernel(b * static_cast<double>(op.out_features) * e);
          t.backward_input_seconds += gemm_kernel(flops, bytes);
          break;
        }
      }
      shapes[op.output] = out;
    }
    // The model's FLOPs as the description counts them (model_flops_per_token reads the same figure).
    const double per_sample = layer.forward_flops_per_sample > 0.0 ? layer.forward_flops_per_sample
                                                                   : 2.0 * static_cast<double>(layer.params);
    t.forward_flops = per_sample * b;
    t.backward_flops = 2.0 * t.forward_flops;
    if (training.checkpointing == Checkpointing::full) {
      t.recompute_seconds = t.forward_seconds;
      t.recompute_flops = t.forward_flops;
    }
  }
  if (!times.empty()) {
    const TensorShape& input = *model.input_shape;
    times.front().forward_seconds += memory_kernel(b * static_cast<double>(input.elements()) * (4.0 + e));
    const double logits = b * static_cast<double>(std::max<std::int64_t>(1, model.classes));
    times.back().forward_seconds += memory_kernel(2.0 * logits * e);
  }
  return times;
}

}  // namespace

// transformers' eager Llama-family modules (modeling_llama.py, and Mistral's and Qwen2's, which are the same code), as
// transformers 5.17 on torch 2.11 runs them: every elementwise step its own kernel, read off torch.profiler per
// operator and shape (bench/llama/eager_module_profile.py; bench/llama/results/2026-11-29-h200x1-eager/). Bytes
// per element (e = the 16-bit bytes, c = a cast between e and fp32: e + 4, none in fp32):
// - LlamaRMSNorm forward: x.to(fp32) (c), pow(2) (8), mean(-1) (4), x * rsqrt(var + eps) (8), .to(e) (c),
//   weight * x (2e). Backward (autograd): grad * weight (2e), the cast back (c), x * rsqrt's two gradients (g * r:
//   8; (g * x).sum(-1): 12 + 4), mean's expand / h (4), pow's x.pow(1) (8), * 2 (8) and grad * that (12), the two
//   fp32 gradients of x added (12), the cast to e (c); a trained weight adds (grad * x).sum over the tokens (4e).
// - Rotary embeddings (apply_rotary_pos_emb) on q and k, per element: q * cos (2e), rotate_half's neg of one half
//   (e) and cat (2e), * sin (2e), the sum (3e); backward the two products' gradients (2e each), neg (e), each
//   half's slice gradient zero-filled and copied in (2e each), and the three gradients of q added (3e each, two).
// - q's and k's gradients copied into the projections' layout in backward (2e each). The attention output needs no
//   copy into o_proj's layout: SDPA writes it in the query's (batch, sequence, heads, head_dim) layout, so
//   transpose(1, 2).contiguous() is a view (one copy_ of [4, 2048, 32, 64] a layer in both TinyLlama profiles, q's
//   gradient, and no forward allocation for it in the allocator trace of sim/activation_memory.cpp).
// - Two residual adds (3e each); backward five gradient accumulations of h (3e each): the residual stream's two,
//   q/k/v's common input's two, gate/up's one.
// - SwiGLU: silu(gate) (2e), * up (3e); backward the product's two gradients (3e each) and silu_backward (3e).
// Timed at the cluster's eager elementwise rate, which was measured over these same kernels.
namespace {
double eager_cast_bytes(double e) { return e == 4.0 ? 0.0 : e + 4.0; }
}  // namespace

EagerBlockBytes eager_rms_norm_bytes(double elements, double e) {
  const double c = eager_cast_bytes(e);
  return {elements * (c + 8.0 + 4.0 + 8.0 + c + 2.0 * e),
          elements * (2.0 * e + c + 8.0 + 16.0 + 4.0 + 8.0 + 8.0 + 12.0 + 12.0 + c), elements * 4.0 * e};
}

EagerBlockBytes eager_llama_block_bytes(const TransformerShape& shape, double tokens, double e) {
  const double n = tokens * static_cast<double>(shape.hidden);
  const double qk = tokens * static_cast<double>(shape.hidden + shape.kv_dim());
  const double nf = tokens * static_cast<double>(shape.ffn_hidden);
  const EagerBlockBytes norm = eager_rms_norm_bytes(n, e);
  EagerBlockBytes b;
  b.forward = 2.0 * norm.forward + 10.0 * e * qk + 2.0 * 3.0 * e * n + 5.0 * e * nf;
  b.backward_input = 2.0 * norm.backward_input + 15.0 * e * qk + 2.0 * e * qk + 5.0 * 3.0 * e * n + 9.0 * e * nf;
  b.backward_weight = 2.0 * norm.backward_weight;
  return b;
}

std::vector<LayerCompute> layer_compute_times(const ModelDescription& model, const ClusterDescription& cluster,
                                              const TrainingConfig& training) {
  const ComputeTimer timer(cluster, training.precision, training.engine);
  std::vector<LayerCompute> times(model.layers.size());
  const double b = static_cast<double>(training.micro_batch);
  const double e = precision_bytes(training.precision);

  if (!model.transformer && model.has_ops() && model.input_shape && training.engine == TrainingEngine::zeroplan) {
    return executor_network_times(timer, model, training);
  }
  if (!model.transformer) {
    for (std::size_t i = 0; i < model.layers.size(); ++i) {
      const LayerDescription& layer = model.layers[i];
      // A dense layer's forward is 2 FLOPs per parameter per sample when the description gives no count.
      const double per_sample = layer.forward_flops_per_sample > 0.0 ? layer.forward_flops_per_sample
                                                                       : 2.0 * static_cast<double>(layer.params);
      const double flops = per_sample * b;
      // The layer's GEMMs (convolutions, linear) split over its modules, each its own kernel: a small
      // convolution is bound by the fixed cost of its launch and its one wave of tiles (the GEMM curve's t_fixed),
      // not by FLOPs. The layer-list form gives the module count, not each module's FLOPs: an even split.
      const double modules = static_cast<double>(std::max<std::int64_t>(1, layer.module_count));
      const double gemm = modules * timer.gemm_seconds(flops / modules);
      // The memory-bound work around them, per saved activation element (activation_elements_per_sample: what
      // the convolutions write and autograd keeps): forward, BatchNorm and ReLU each read and write it (4 e);
      // backward, BatchNorm's and ReLU's gradients read the input and the incoming gradient and write theirs (6 e).
      // Kernels: forward a convolution or linear, a norm and an activation per module pair (one per module and
      // half again), backward the input and weight gradients of each GEMM and the norm's and activation's (two per
      // module and half again).
      const double activation_bytes = static_cast<double>(layer.activation_elements_per_sample) * b * e;
      LayerCompute& t = times[i];
      t.forward_seconds = gemm + timer.streaming_seconds(4.0 * activation_bytes, 1.5 * modules);
      t.forward_flops = flops;
      t.backward_input_seconds = gemm + timer.streaming_seconds(6.0 * activation_bytes, 1.5 * modules);
      t.backward_weight_seconds = gemm + timer.streaming_seconds(0.0, 0.5 * modules);
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
  // The embedding output, the final norm and the residual stream are fp32 under autocast (fp32 tables).
  const double r = training.autocast_fp32_params ? 4.0 : e;
  bool has_head = false;
  for (std::size_t i = 0; i < model.layers.size(); ++i) {
    const LayerDescription& layer = model.layers[i];
    LayerCompute& t = times[i];
    if (layer.kind == "transformer_block") {
      t = block;
    } else if (layer.kind == "embedding") {
      // Lookup: each table's rows gathered (read + write h e per token), token and position embeddings added
      // (3 h e). Backward: the table gradient zeroed (V h e) and the output gradient accumulated into the rows
      // of each table (read dy, read + write the row: 3 h e per token), two kernels per table.
      const double tables = shape.learned_positions ? 2.0 : 1.0;
      t.forward_seconds = timer.streaming_seconds(tables * 2.0 * tokens * h * r, tables) +
                          (tables > 1.0 ? timer.streaming_seconds(3.0 * tokens * h * r, 1.0) : 0.0);
      t.backward_weight_seconds =
          timer.streaming_seconds(static_cast<double>(shape.vocab_size) * h * r + tables * 3.0 * tokens * h * r,
                                  2.0 * tables);
      if (shape.embedding_norm) {
        Work norm;
        add_norm(timer, tokens, h, r, norm);
        t.forward_seconds += norm.forward;
        t.backward_input_seconds += norm.backward_input;
        t.backward_weight_seconds += norm.backward_weight;
      }
    } else if (layer.kind == "norm" && transformers_llama_modules(shape, training)) {
      const EagerBlockBytes norm = eager_rms_norm_bytes(tokens * h, e);  // the model's final LlamaRMSNorm
      t.forward_seconds = timer.eager_elementwise_seconds(norm.forward);
      t.backward_input_seconds = timer.eager_elementwise_seconds(norm.backward_input);
      t.backward_weight_seconds = timer.eager_elementwise_seconds(norm.backward_weight);
    } else if (layer.kind == "norm") {
      Work norm;
      add_norm(timer, tokens, h, r, norm);
      t.forward_seconds = norm.forward;
      t.backward_input_seconds = norm.backward_input;
      t.backward_weight_seconds = norm.backward_weight;
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
  // The global gradient norm reads the fp32 gradient once (DeepSpeed computes it for clipping and the overflow
  // check; torch clip_grad_norm_ likewise); clipping then scales the gradient in place (read + write).
  const double norm = 4.0 + (training.gradient_clipping > 0.0 ? 8.0 : 0.0);
  if (training.autocast_fp32_params && training.precision != Precision::fp32) {
    // Autocast over fp32 parameters (torch fused AdamW): the 16-bit weight gradient accumulated into the fp32
    // .grad (read e, write 4); the step reads param, states, gradient and writes param and states (no 16-bit
    // copy); the next forward casts every weight to 16-bit once (read 4, write e), counted here.
    return (e + 4.0) + (4.0 + states + 4.0) + (4.0 + states) + (4.0 + e) + norm;
  }
  if (training.precision == Precision::fp32) {
    // No master copy: read param, states, gradient; write param and states.
    return (4.0 + states + 4.0) + (4.0 + states) + norm;
  }
  // Mixed precision: the 16-bit gradient upcast into the fp32 gradient (read e, write 4); the step reads the fp32
  // master, states and gradient and writes the master, the states and the 16-bit copy of the parameter.
  return (e + 4.0) + (4.0 + states + 4.0) + (4.0 + states + e) + norm;
}

double executor_optimizer_step_bytes_per_param(const TrainingConfig& training) {
  const double states = optimizer_state_bytes_per_param(training.optimizer);
  const double e = precision_bytes(training.precision);
  if (training.precision == Precision::fp32) return 4.0 + (4.0 + 4.0 + states) + (4.0 + states);
  // The norm's read and AdamW's read of the gradients: fp32 with data_types.grad_accum_dtype fp32. The 16-bit copy
  // is written unless stage 3 keeps none (the all-gathers cast the master: exec/zero/zero_buffer_layout.h
  // stage3_gathers_cast_master; a LoRA plan's adapters, whose engine it is, are too few to count).
  const double g = training.grad_accum_dtype == Precision::fp32 ? 4.0 : e;
  const bool copy = !exec::stage3_gathers_cast_master(executor_zero_settings(training, training.zero.stage), true,
                                                      false);
  return g + (g + 4.0 + states) + (4.0 + states + (copy ? e : 0.0));
}

double model_flops_per_token(const ModelDescription& model, const TrainingConfig& training) {
  if (model.transformer) {
    const TransformerShape& shape = *model.transformer;
    // PaLM appendix B: 6N + 12 * L * h * s (attention matmuls, causal mask not discounted).
    const double attention = 12.0 * static_cast<double>(shape.layers) * static_cast<double>(shape.hidden) *
                             static_cast<double>(training.seq_len);
    if (!training.lora.enabled) return 6.0 * static_cast<double>(model.params()) + attention;
    // LoRA computes no weight gradient for the frozen N (2N of PaLM's 6N) and trains the adapters fully.
    const double adapters = static_cast<double>(lora_figures(model, training).trainable_params);
    return 4.0 * static_cast<double>(model.params()) + 6.0 * adapters + attention;
  }
  double forward = 0.0;
  for (const LayerDescription& layer : model.layers) {
    forward += layer.forward_flops_per_sample > 0.0 ? layer.forward_flops_per_sample
                                                    : 2.0 * static_cast<double>(layer.params);
  }
  return 3.0 * forward;
}

std::string model_flops_convention(const ModelDescription& model, const TrainingConfig& training) {
  if (!model.transformer) return "3 x forward FLOPs per sample (forward + backward at 2x)";
  if (training.lora.enabled)
    return "4N + 6 N_adapters + 12*L*h*s per token (PaLM appendix B's 6N less the frozen weights' gradients, LoRA)";
  return "6N + 12*L*h*s per token (PaLM appendix B)";
}

}  // namespace zeroplan
