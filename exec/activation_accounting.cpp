#include "exec/activation_accounting.h"

#include <algorithm>

#include "core/nf4_quantization.h"
#include "exec/lora_layout.h"
#include "exec/param_layout.h"
#include "exec/zero/zero_buffer_layout.h"
#include "exec/zero/zero_partition.h"

namespace zeroplan::exec {

std::vector<std::pair<std::string, std::int64_t>> ExpectedMemory::components() const {
  return {{"params", params},     {"grads", grads},   {"master_params", master_params},
          {"optimizer_states", optimizer_states}, {"activations", activations}, {"logits", logits},
          {"workspace", workspace}};
}

std::int64_t column_sum_width(const ModelShape& s) {
  std::int64_t w = s.norm == NormKind::layer_norm ? 2 * s.hidden : s.hidden;  // norm weight (and bias) gradients
  if (s.qkv_bias) w = std::max(w, s.qkv_dim());
  if (s.attn_out_bias || s.mlp_bias) w = std::max(w, s.hidden);
  if (s.mlp_bias) w = std::max(w, s.mlp_in_dim());
  return w;
}

std::int64_t backward_working_set_bytes(const ExecConfig& c) {
  const ModelShape& s = c.shape;
  const std::int64_t e = element_bytes(c.precision), sb = c.micro_batch * c.seq_len;
  // dresidual (h), d(norm input / attention output) (max(h, q)), d(MLP / QKV) (max(qkv, F)), D (fp32 per head)
  return e * sb * (s.hidden + std::max(s.hidden, s.q_dim()) + std::max(s.qkv_dim(), s.ffn_hidden)) + 4 * s.heads * sb;
}

namespace {

// One kept block's saved tensors, by kind (exec/cuda/cuda_trainer.cu allocate): element counts per token of the
// model-precision tensors [norm 1 out, qkv, attention out, norm 2 in, norm 2 out, MLP pre-activation, MLP
// activation], whether selective recompute rebuilds it instead, and the fp32 bytes per token.
struct BlockSaved {
  std::int64_t width;
  bool recomputed;
};
std::vector<BlockSaved> block_saved(const ModelShape& s) {
  return {{s.hidden, true}, {s.qkv_dim(), false}, {s.q_dim(), false}, {s.hidden, false},
          {s.hidden, true}, {s.mlp_in_dim(), false}, {s.ffn_hidden, true}};
}
std::int64_t norm_stat_rows(const ModelShape& s) { return s.norm == NormKind::layer_norm ? 2 : 1; }  // per norm
// block_saved's MLP entries, [kMlpSavedFirst, end): one allocation of their own (mlp_saved_layout).
constexpr std::size_t kMlpSavedFirst = 5;

}  // namespace

ExpectedMemory expected_device_memory(const ExecConfig& c) {
  if (!c.network && c.lora.enabled) {
    // LoRA: the list of allocations at one rank, stage 0, summed (the adapters' and the frozen base's engines, the
    // trainer's buffers and LoRA's own; device_allocations says where each comes from).
    ExecConfig one = c;
    one.zero.stage = 0;
    ExpectedMemory m;
    for (const DeviceAllocation& a : device_allocations(one, 1)) {
      if (a.component == "params") m.params += a.bytes;
      else if (a.component == "grads") m.grads += a.bytes;
      else if (a.component == "master_params") m.master_params += a.bytes;
      else if (a.component == "optimizer_states") m.optimizer_states += a.bytes;
      else if (a.component == "activations") m.activations += a.bytes;
      else if (a.component == "logits") m.logits += a.bytes;
      else if (a.component == "workspace") m.workspace += a.bytes;
    }
    return m;
  }
  const ModelShape& s = c.shape;
  const ParamLayout layout(s);
  const std::int64_t P = layout.total();
  const std::int64_t e = element_bytes(c.precision);
  const std::int64_t B = c.micro_batch, T = c.seq_len, C = s.hidden, L = s.layers, a = s.heads;
  const std::int64_t sb = B * T;
  ExpectedMemory m;
  m.params = e * P;
  // fp32 gradient accumulation: fp32 gradients beside the micro-step gradients backward writes (zero_buffer_layout.h)
  m.grads = c.zero.fp32_grad_accumulation ? (4 + e) * P : e * P;
  m.master_params = c.precision == ExecPrecision::fp32 ? 0 : 4 * P;
  m.optimizer_states = 8 * P;
  if (c.zero.offload_optimizer) m.master_params = m.optimizer_states = 0;  // in host memory (ZeRO-Offload)
  // Per kept block: the saved tensors (recomputed ones left out under selective), the two norms' statistics and
  // the logsumexp (fp32).
  std::int64_t kept = 0, rebuilt = 0;
  for (const BlockSaved& t : block_saved(s)) (t.recomputed ? rebuilt : kept) += t.width;
  const std::int64_t stats = 4 * 2 * norm_stat_rows(s) * sb + 4 * a * sb;
  const std::int64_t final_norm = e * sb * C + 4 * norm_stat_rows(s) * sb;  // output and statistics
  if (c.recompute == ExecRecompute::none) {
    m.activations = e * (L + 1) * sb * C + L * (e * sb * (kept + rebuilt) + stats) + final_norm;
  } else if (c.recompute == ExecRecompute::selective) {
    m.activations = e * (L + 1) * sb * C + L * (e * sb * kept + stats) + final_norm;
  } else {
    m.activations = e * (L + 1) * sb * C + (e * sb * (kept + rebuilt) + stats) + final_norm;
  }
  m.activations += backward_working_set_bytes(c);
  m.logits = e * sb * s.padded_vocab + 4 * sb;
  const bool det = c.zero.deterministic;
  const std::int64_t rope = s.position == PositionKind::rope ? 4 * T * s.head_size : 0;  // cos and sin, T x HS/2 each
  m.workspace = 4 * (column_sum_scratch_floats(sb, column_sum_width(s), det) + 1) + (det ? 4 * (3 * sb + 1) : 0) +
                4 * (kNormPartials + 1) + 4 * kNormSlots + 8 * sb + rope + kCublasWorkspaceBytes +
                cudnn_attention_workspace_bytes(c);
  return m;
}

NetworkDeviceLayout network_device_layout(const ExecConfig& c, const NetworkPlan& plan) {
  const std::int64_t e = element_bytes(c.precision), B = c.micro_batch;
  const NetworkShape& net = *c.network;
  auto aligned = [](std::int64_t bytes) { return (bytes + kNetworkAlignment - 1) / kNetworkAlignment * kNetworkAlignment; };
  NetworkDeviceLayout d;
  auto add = [&d](int& where, const char* component, std::int64_t bytes, const char* what) {
    where = static_cast<int>(d.allocations.size());
    d.allocations.push_back({component, bytes, what});
  };
  const std::size_t logits_buffer = static_cast<std::size_t>(plan.ops.back().buffer);
  add(d.input, "activations", e * B * net.input.elements(), "network input (NHWC)");
  std::int64_t saved = 0;
  d.saved_offset.assign(plan.buffers.size(), -1);
  for (std::size_t b = 0; b < plan.buffers.size(); ++b)
    if (plan.buffers[b].saved && b != logits_buffer) {
      d.saved_offset[b] = saved;
      saved += aligned(e * B * plan.buffers[b].elements);
    }
  if (saved > 0) add(d.saved, "activations", saved, "saved activations");
  d.transient_slot_bytes = aligned(e * B * plan.transient_slot_elements);
  if (plan.transient_slots > 0)
    add(d.transient, "activations", plan.transient_slots * d.transient_slot_bytes, "transient activations");
  d.grad_slot_bytes = aligned(e * B * plan.grad_slot_elements);
  if (plan.grad_slots > 0)
    add(d.grads, "activations", plan.grad_slots * d.grad_slot_bytes, kActivationGradientsName);
  std::int64_t statistics = 0, indices = 0, running = 0;
  d.statistics_offset.assign(plan.ops.size(), -1);
  d.running_offset.assign(plan.ops.size(), -1);
  d.indices_offset.assign(plan.ops.size(), -1);
  std::int64_t bn_scratch = 0, bias_scratch = 0;
  for (std::size_t k = 0; k < plan.ops.size(); ++k) {
    const NetworkOp& p = plan.ops[k];
    if (p.op.kind == LayerOpKind::batch_norm) {
      d.statistics_offset[k] = statistics;
      statistics += aligned(4 * 2 * p.op.channels);
      d.running_offset[k] = running;
      running += aligned(4 * 2 * p.op.channels);
      bn_scratch = std::max(bn_scratch, batchnorm_scratch_floats(B * p.in.height * p.in.width, p.op.channels));
    } else if (p.op.kind == LayerOpKind::max_pool2d) {
      d.indices_offset[k] = indices;
      indices += aligned(4 * B * p.out.elements());
    } else if (p.op.kind == LayerOpKind::conv2d) {
      d.largest_conv_weight = std::max(d.largest_conv_weight, p.op.params() - (p.op.bias ? p.op.out_channels : 0));
      if (p.op.bias)
        bias_scratch = std::max(bias_scratch, bias_grad_scratch_floats(B * p.out.height * p.out.width, p.op.out_channels));
    } else if (p.op.kind == LayerOpKind::linear && p.op.bias) {
      bias_scratch = std::max(bias_scratch, bias_grad_scratch_floats(B, p.op.out_features));
    }
  }
  if (statistics > 0) add(d.statistics, "activations", statistics, "BatchNorm batch statistics");
  if (indices > 0) add(d.indices, "activations", indices, "max-pool indices");
  add(d.logits, "logits", e * B * plan.buffers[logits_buffer].elements, "logits / dlogits (in place)");
  add(d.losses, "logits", 4 * B, "per-sample losses");
  add(d.correct, "logits", 4 * B, "per-sample correct flags");
  if (running > 0) add(d.running, "workspace", running, "BatchNorm running statistics (buffers)");
  add(d.images, "workspace", 4 * B * net.input.elements(), "images (fp32 upload)");
  add(d.labels, "workspace", 4 * B, "labels");
  add(d.dloss, "workspace", 4, "loss gradient scale (fp32)");
  if (d.largest_conv_weight > 0) {
    add(d.conv_weight, "workspace", e * d.largest_conv_weight, "convolution weight (channels-last)");
    add(d.conv_weight_grad, "workspace", e * d.largest_conv_weight, "convolution weight gradient (channels-last)");
  }
  d.batchnorm_scratch = bn_scratch;
  if (bn_scratch > 0) add(d.batchnorm_partials, "workspace", 4 * bn_scratch, "BatchNorm reduction partials");
  d.bias_grad_floats = bias_scratch;
  if (bias_scratch > 0) add(d.bias_partials, "workspace", 4 * bias_scratch, "bias gradient partials");
  add(d.cudnn_workspace, "workspace", kCudnnWorkspaceBytes, "cuDNN workspace");
  add(d.cublas_workspace, "workspace", kCublasWorkspaceBytes, "cuBLASLt workspace");
  return d;
}

namespace {

// One ZeRO engine's allocations for `layout` (exec/zero/zero_engine.cpp: the constructor and setup_stage3) and its
// CUDA device's gradient-norm buffers (exec/cuda/cuda_zero_device.cu, constructor). A frozen engine (LoRA's base,
// Trainability::frozen) holds the parameters only, and at stage 3 its gathered units.
// `owner` prefixes each name ("frozen base: ", "adapters: " with LoRA's two engines), so that a plan's terms say
// which engine holds what.
void add_engine_allocations(std::vector<DeviceAllocation>& a, const ExecConfig& c, const ParamLayout& layout, int world,
                            bool frozen, const std::string& owner = "", bool holds_partition = false) {
  const ZeroPartition partition(layout, world, 0, partition_rules(c.zero));
  const ZeroBufferLayout buffers = zero_buffer_layout(layout, partition, c.zero, c.grad_accum);
  const std::int64_t e = element_bytes(c.precision), n = layout.total(), part = partition.partition_elements();
  const int stage = c.zero.stage;
  const std::int64_t states = stage == 0 ? n : part;
  // exec/zero/zero_engine.cpp (constructor, setup_stage3); CUDA kernels overwrite, so no micro-step gradients.
  // offload_param (stage 3): the partition in host memory, staging buffers on the device instead.
  // Stage 3 with the fp32 master on the device keeps no 16-bit partition (zero_buffer_layout.h
  // stage3_gathers_cast_master).
  if (!c.zero.offload_param && !stage3_gathers_cast_master(c.zero, c.precision != ExecPrecision::fp32, frozen))
    a.push_back({"params", e * (stage == 3 ? part : n), owner + (stage == 3 ? "parameter partition" : "parameters")});
  if (!frozen) {
    const std::int64_t grad_bytes = c.zero.fp32_grad_accumulation ? 4 : e;
    // (the partition in the trainer's MLP tensors instead: mlp_saved_layout)
    if (!holds_partition)
      a.push_back({"grads", grad_bytes * (stage >= 2 ? part : n), owner + (stage >= 2 ? "gradient partition" : "gradients")});
    if (!c.zero.offload_optimizer) {
      if (c.precision != ExecPrecision::fp32) a.push_back({"master_params", 4 * states, owner + "fp32 master weights"});
      a.push_back({"optimizer_states", 4 * states, owner + "AdamW momentum"});
      a.push_back({"optimizer_states", 4 * states, owner + "AdamW variance"});
    }
    if (buffers.micro_step_gradients > 0)
      a.push_back({"grads", e * buffers.micro_step_gradients, owner + "micro-step gradients"});
    for (std::int64_t elements : buffers.slot_elements)
      a.push_back({"gradient_buckets", e * elements, owner + "gradient bucket buffer"});
    if (buffers.accumulation_scratch > 0)
      a.push_back({"gradient_buckets", (c.zero.fp32_communication ? 4 : e) * buffers.accumulation_scratch,
                   owner + "reduce-scatter output (accumulation)"});
    if (buffers.communication_copy > 0)
      a.push_back({"gradient_buckets", 4 * buffers.communication_copy, owner + "fp32 communication copy of a bucket"});
  }
  if (stage == 3 && buffers.persistent_elements > 0)
    a.push_back({"gathered_params", e * buffers.persistent_elements, owner + "persistent tensors (whole)"});
  if (stage == 3 && buffers.arena_elements > 0)
    a.push_back({"gathered_params", e * buffers.arena_elements, owner + "gathered-parameter arena"});
  for (int i = 0; i < buffers.param_staging_buffers; ++i)
    a.push_back({"offload_buffers", e * buffers.param_staging_elements, owner + "parameter staging buffer"});
  // exec/cuda/cuda_zero_device.cu (constructor): the gradient-norm slots and partials.
  a.push_back({"workspace", 4 * kNormSlots, owner + "gradient-norm slots"});
  a.push_back({"workspace", 4 * (kNormPartials + 1), owner + "gradient-norm partials"});
}

}  // namespace

std::vector<DeviceAllocation> device_allocations(const ExecConfig& c, int world) {
  std::vector<DeviceAllocation> a;
  const bool lora = !c.network && c.lora.enabled;
  const std::int64_t e = element_bytes(c.precision);
  if (lora) {
    // LoRA (exec/cuda/cuda_trainer.cu constructor): the frozen base's engine and device first (the model's layout,
    // its block weights left out under NF4), then the adapters' (exec/lora_layout.h).
    add_engine_allocations(a, c, ParamLayout(c.shape, zero_alignment(world), !c.lora.quantize_nf4), world, true,
                           c.lora.quantize_nf4 ? "frozen base (unquantised tensors): " : "frozen base: ");
    add_engine_allocations(a, c, trained_layout(c, world), world, false, "adapters: ");
  } else {
    add_engine_allocations(a, c,
                           c.network ? ParamLayout(*c.network, zero_alignment(world))
                                     : ParamLayout(c.shape, zero_alignment(world)),
                           world, false, "", !c.network && mlp_saved_layout(c, world).holds_gradient_partition);
  }
  if (c.network) {
    const NetworkDeviceLayout d = network_device_layout(c, plan_network(*c.network));
    a.insert(a.end(), d.allocations.begin(), d.allocations.end());
    return a;
  }
  // exec/cuda/cuda_trainer.cu allocate(), in its order.
  const ModelShape& s = c.shape;
  const std::int64_t B = c.micro_batch, T = c.seq_len, C = s.hidden, L = s.layers, H = s.heads;
  const std::int64_t bt = B * T, nb = c.recompute == ExecRecompute::full ? 1 : L;
  a.push_back({"activations", e * (L + 1) * bt * C, "block inputs (residual stream)"});
  const bool selective = c.recompute == ExecRecompute::selective;
  // block_saved's entries before the MLP's, then the MLP's tensors as one allocation (mlp_saved_layout)
  static const char* const kSavedNames[kMlpSavedFirst] = {"norm 1 outputs", "QKV", "attention outputs",
                                                          "norm 2 inputs", "norm 2 outputs"};
  const std::vector<BlockSaved> saved = block_saved(s);
  for (std::size_t i = 0; i < kMlpSavedFirst; ++i)
    if (!(selective && saved[i].recomputed)) a.push_back({"activations", e * nb * bt * saved[i].width, kSavedNames[i]});
  const MlpSavedLayout mlp = mlp_saved_layout(c, world);
  a.push_back({"activations", mlp.bytes(), mlp.name()});
  a.push_back({"activations", 4 * nb * 2 * norm_stat_rows(s) * bt, "norm statistics"});
  a.push_back({"activations", 4 * nb * bt * H, "attention logsumexp"});
  a.push_back({"activations", e * bt * C, "final norm output"});
  a.push_back({"activations", 4 * norm_stat_rows(s) * bt, "final norm statistics"});
  a.push_back({"logits", e * bt * s.padded_vocab, "logits / dlogits (in place)"});
  a.push_back({"logits", 4 * bt, "per-token losses"});
  // backward working set
  a.push_back({"activations", e * bt * C, "backward: dresidual"});
  a.push_back({"activations", e * bt * std::max(C, s.q_dim()), "backward: d(norm input)"});
  a.push_back({"activations", e * bt * std::max(s.qkv_dim(), s.ffn_hidden), "backward: d(MLP / QKV)"});
  a.push_back({"activations", 4 * bt * H, "backward: rowsum(dO*O)"});
  const bool det = c.zero.deterministic;
  a.push_back({"workspace", 4 * (column_sum_scratch_floats(bt, column_sum_width(s), det) + 1), "column-sum scratch"});
  a.push_back({"workspace", 4 * 2 * bt, "input and target token ids"});
  if (det && !lora) a.push_back({"workspace", 4 * (3 * bt + 1), "ordered dwte token positions"});  // (LoRA: frozen embeddings)
  if (s.position == PositionKind::rope) a.push_back({"workspace", 4 * T * s.head_size, "RoPE cos and sin"});
  a.push_back({"workspace", kCublasWorkspaceBytes, "cuBLASLt workspace"});
  if (const std::int64_t w = cudnn_attention_workspace_bytes(c); w > 0)
    a.push_back({"workspace", w, "cuDNN fused attention workspace"});
  if (lora) {
    // cuda_trainer.cu allocate_lora: x A^T per kept block and adapted module, one block weight's d(x A^T); NF4's
    // codes and constants of every block weight and the dequantised scratch weight.
    const std::vector<AdaptedLinear> modules = adapted_linears(s, c.lora);
    const std::int64_t r = c.lora.rank;
    a.push_back({"activations", e * nb * static_cast<std::int64_t>(modules.size()) * bt * r, "LoRA x A^T"});
    a.push_back({"activations", e * lora_adapters_per_weight(modules) * bt * r, "LoRA d(x A^T) of one block weight"});
    if (c.lora.quantize_nf4) {
      const ParamLayout full(s);
      std::int64_t codes = 0, widest = 0;
      for (std::int64_t l = 0; l < L; ++l)
        for (BlockTensor w : {kQkvW, kAttProjW, kFcW, kFcProjW}) {
          // One bitsandbytes tensor per transformers module (Llama's qkv and gate_up fuse 3 and 2): each its own
          // 256-block scales and offset.
          codes += nf4_module_tensors_bytes(nf4_module_elements(s, w));
          widest = std::max(widest, full.block(l, w).numel());
        }
      a.push_back({"params", codes, "frozen base: NF4 codes and constants"});
      a.push_back({"params", e * widest, "frozen base: dequantised scratch weight"});
    }
  }
  return a;
}

MlpSavedLayout mlp_saved_layout(const ExecConfig& c, int world) {
  MlpSavedLayout m;
  if (c.network) return m;
  const ModelShape& s = c.shape;
  const std::int64_t e = element_bytes(c.precision), bt = c.micro_batch * c.seq_len;
  m.blocks = c.recompute == ExecRecompute::full ? 1 : s.layers;
  m.activations_offset = e * bt * s.mlp_in_dim();
  m.block_stride = m.activations_offset + (c.recompute == ExecRecompute::selective ? 0 : e * bt * s.ffn_hidden);
  const bool fp32_gradients = c.precision != ExecPrecision::fp32 && c.zero.fp32_grad_accumulation;
  if (c.lora.enabled || c.zero.stage < 2 || c.grad_accum != 1 || c.recompute == ExecRecompute::full ||
      c.zero.offload_optimizer || c.zero.offload_param || fp32_gradients || world < 1)
    return m;
  const ParamLayout layout = trained_layout(c, world);
  const ZeroPartition partition(layout, world, 0, partition_rules(c.zero));
  // A bucket reduced once block r's backward is done may write its chunk up to the end of block r's tensors, at
  // beyond + (L - r) * stride; the buckets reduced before any block (the head unit's) take r = L, the embeddings'
  // (reduced last) r = 0.
  const std::int64_t L = s.layers, stride = m.block_stride;
  std::int64_t beyond = 0;
  for (const GradientBucket& b : partition.buckets()) {
    std::int64_t r = 0;
    if (b.begin >= layout.tail_begin()) r = L;
    else if (b.begin >= layout.block_begin(0))
      while (r + 1 < L && layout.block_begin(r + 1) <= b.begin) ++r;
    beyond = std::max(beyond, e * (b.partition_offset + b.chunk) - (L - r) * stride);
  }
  beyond = (beyond + kNetworkAlignment - 1) / kNetworkAlignment * kNetworkAlignment;
  if (beyond >= e * partition.partition_elements()) return m;  // nothing saved
  m.gradient_partition_beyond = beyond;
  m.holds_gradient_partition = true;
  return m;
}

std::int64_t allocation_granularity_bytes(const std::vector<DeviceAllocation>& allocations) {
  const std::int64_t g = kDeviceAllocationGranularity;
  std::int64_t large = 0, small = 0;
  for (const DeviceAllocation& x : allocations) {
    if (x.bytes >= g) large += (x.bytes + g - 1) / g * g - x.bytes;
    else small += x.bytes;
  }
  return large + ((small + g - 1) / g * g - small);
}

}  // namespace zeroplan::exec
