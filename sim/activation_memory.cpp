#include "sim/activation_memory.h"

#include <algorithm>

#include "sim/executor_device_memory.h"
#include "sim/memory_model.h"
#include "sim/saturating.h"
#include "sim/term_format.h"

namespace zeroplan {

namespace {
constexpr const char* kKorthikanti = "Korthikanti et al. 2022 (arXiv 2205.05198) sec. 4.1";
constexpr const char* kKorthikantiRecompute = "Korthikanti et al. 2022 (arXiv 2205.05198) sec. 5";
constexpr const char* kOutputLayer = "Korthikanti et al. 2022 (arXiv 2205.05198) sec. 4.3; zero-formulas.md sec. 4";

int mlp_tensors(ActivationKind activation) { return activation == ActivationKind::swiglu ? 3 : 2; }

// transformers' Llama-family modules (modeling_llama.py, modeling_mistral.py, modeling_qwen2.py; transformers 5.17)
// under the DeepSpeed engine run eager, and autograd saves a tensor only for an operation whose backward needs it:
// a linear's input only when its weight trains (or PEFT adapts it: lora_A saves the same tensor), a multiply's
// factor only when the other factor needs a gradient. Per token (e the model dtype):
//  - LlamaRMSNorm: hidden_states.to(float32), saved by pow(2) and by the multiply with rsqrt (4h; in fp32 training
//    the input itself); the normalised value cast back, saved by the weight's multiply when the weight trains (h e);
//    the output, saved by the next linears when one of them trains (h e).
//  - Attention: SDPA saves its inputs (the rotated q and k, and v: the list's q, k, v; rotary embeddings save only
//    cos and sin) and its output (h e), which is also o_proj's input: cuDNN's, flash and the memory-efficient
//    kernels write the output in the query's (batch, sequence, heads, head_dim) layout, so sdpa_attention.py's
//    transpose(1, 2).contiguous() and the reshape before o_proj copy nothing. The allocator history of TinyLlama at
//    stage 1 on one H200 (bench/deepspeed/results-pending/memtrace-2026-11-29-hf/hf_tl_s1.memtrace.json.gz) has one
//    32 MiB block a layer from sdpa_attention.py live at the loss and none from the reshape; counted twice, the
//    attention output put every transformers row's allocated peak 0.7-2 GiB high (+2.5..+7.3%).
//  - LlamaMLP down_proj(act_fn(gate_proj(x)) * up_proj(x)): gate (SiLU's input), silu(gate) and up (the product's
//    inputs): 3fe; the product, saved when down_proj trains (f e).
// Training everything that is 4h + 2he a norm where the list has 2he, and 4fe for the MLP where it has 3fe (the
// same trace, layer by layer: the norms' 64 MiB fp32 inputs and two 32 MiB casts, the MLP's four 88 MiB tensors).
// With LoRA the frozen embedding's output needs no gradient, so the first block's first norm keeps nothing either;
// that one norm of the model's 2L is not taken off here.

// Under zero.Init at stage 3 DeepSpeed runs every F.linear as zero/linear.py's LinearFunctionForZeroStage3 (as the
// timeline times it: sim/deepspeed_schedule.cpp), whose forward saves its input, weight and bias whether or not the
// weight trains (ctx.save_for_backward(input, weight, bias)). So a LoRA plan's frozen 16-bit linears keep their inputs
// there, the LM head's too: the allocator history of TinyLlama's LoRA row at stage 3 on one H200
// (bench/deepspeed/results-pending/memtrace-2026-11-30-lora-s3/) has at the loss, per layer, the second norm's output
// (32 MiB) and the product down_proj takes (88 MiB), and the final norm's output, which the same row at stage 0 frees.
// bitsandbytes' quantized linears do not call F.linear.
bool zero3_linear_functions(const TrainingConfig& training) {
  return training.engine == TrainingEngine::deepspeed && training.zero.stage == 3 && training.zero.zero_init &&
         training.lora.quantize_base == BaseQuantization::none;
}

// Whether a block linear (modeling_llama.py's name and path in the block) keeps its input for backward: every
// weight trains, or PEFT adapts it (a target equal to its name or path, or all-linear: core/lora_modules.h), or
// DeepSpeed's stage-3 linear function runs it.
bool linear_saves_input(const TrainingConfig& training, const std::string& name, const std::string& path) {
  if (!training.lora.enabled || zero3_linear_functions(training)) return true;
  return std::any_of(training.lora.targets.begin(), training.lora.targets.end(), [&](const std::string& t) {
    return t == "all-linear" || t == name || t == path;
  });
}

struct TransformersSaved {
  bool norm_weights = true;  // the RMSNorm weights train (the normalised value kept)
  bool attention_in = true;  // q_proj, k_proj or v_proj keeps the first norm's output
  bool mlp_in = true;        // gate_proj or up_proj keeps the second norm's output
  bool down_proj_in = true;
};

TransformersSaved transformers_saved(const TrainingConfig& training) {
  TransformersSaved s;
  s.norm_weights = !training.lora.enabled;
  s.attention_in = linear_saves_input(training, "q_proj", "self_attn.q_proj") ||
                   linear_saves_input(training, "k_proj", "self_attn.k_proj") ||
                   linear_saves_input(training, "v_proj", "self_attn.v_proj");
  s.mlp_in = linear_saves_input(training, "gate_proj", "mlp.gate_proj") ||
             linear_saves_input(training, "up_proj", "mlp.up_proj");
  s.down_proj_in = linear_saves_input(training, "down_proj", "mlp.down_proj");
  return s;
}

// One RMSNorm's saved bytes per token: its fp32 input, the normalised value when its weight trains, its output
// when the next linear keeps it.
Bytes transformers_norm_bytes(const TransformerShape& shape, int e, bool weight_trains, bool output_kept) {
  return 4 * shape.hidden + ((weight_trains ? 1 : 0) + (output_kept ? 1 : 0)) * shape.hidden * e;
}
int norm_statistics_per_norm(NormKind norm) { return norm == NormKind::layer_norm ? 2 * 4 : 4; }

// Per token: the gradient temporaries alive while one block runs its backward. MLP: the gradients of its
// inner tensors (2 or 3 of f) plus the residual-stream gradient in and out (2h). Attention: dQ, dK, dV,
// the incoming and outgoing residual gradients; unfused adds dP and dS (2 a s e), fused flash backward
// keeps the fp32 row sums D = rowsum(dO * O) (4 a).
// zeroplan's executor (exec/cuda/cuda_trainer.cu allocate) reuses three buffers for every layer instead: the
// residual gradient, the norm-input gradient (h each) and one FC / QKV gradient of max(f, h + 2kv), with the fp32
// row sums of its flash backward (4a).
Bytes backward_working_set_per_token(const TransformerShape& shape, const TrainingConfig& training, int e) {
  const std::int64_t h = shape.hidden, f = shape.ffn_hidden, kv = shape.kv_dim(), a = shape.heads;
  if (training.engine == TrainingEngine::zeroplan) return (std::max(f, h + 2 * kv) + 2 * h) * e + 4 * a;
  const Bytes mlp = (mlp_tensors(shape.activation) * f + 2 * h) * e;
  const Bytes attention =
      (h + 2 * kv + 2 * h) * e + (training.fused_attention ? 4 * a : sat_mul(2 * a * e, training.seq_len));
  return std::max(mlp, attention);
}

Bytes logits_per_token(const TransformerShape& shape, const TrainingConfig& training, int e) {
  // fused cross entropy writes dlogits in place over the 16-bit logits: one s*b*V buffer. Otherwise the
  // logits and their gradient, plus an fp32 copy and its gradient when the loss is computed in fp32.
  if (training.fused_cross_entropy) return shape.vocab_size * e;
  return shape.vocab_size * (2 * e + (training.fp32_loss ? 2 * 4 : 0));
}
// Bytes per token of one block that selective recompute does not keep. Megatron's (Korthikanti sec. 5), which
// DeepSpeed and the ideal engine follow: the attention core. zeroplan's executor (exec/exec_config.h
// ExecRecompute::selective, after llm.c's recompute 2): the two norm outputs and the activation function's
// output (GELU; silu(gate)*up for SwiGLU), rebuilt in backward inside the backward working set.
Bytes selective_recomputed_per_token(const TransformerShape& shape, const TrainingConfig& training, int e,
                                     const BlockActivationTerms& terms) {
  if (training.engine == TrainingEngine::zeroplan) return (2 * shape.hidden + shape.ffn_hidden) * e;
  return terms.attention_core;
}
}  // namespace

bool transformers_llama_modules(const TransformerShape& shape, const TrainingConfig& training) {
  return training.engine == TrainingEngine::deepspeed && training.model_code == ModelCode::transformers &&
         shape.norm == NormKind::rms_norm && shape.activation == ActivationKind::swiglu;
}

BlockActivationTerms block_activation_terms(const TransformerShape& shape, const TrainingConfig& training,
                                            int e) {
  const std::int64_t h = shape.hidden, f = shape.ffn_hidden, kv = shape.kv_dim(), a = shape.heads;
  const bool dropout = shape.dropout > 0.0;
  BlockActivationTerms t;
  t.norm_inputs_outputs = 4 * h * e;
  t.qkv = (h + 2 * kv) * e;
  t.attention_output = h * e;
  t.mlp = mlp_tensors(shape.activation) * f * e;
  if (transformers_llama_modules(shape, training)) {
    const TransformersSaved saved = transformers_saved(training);
    t.norm_inputs_outputs = transformers_norm_bytes(shape, e, saved.norm_weights, saved.attention_in) +
                            transformers_norm_bytes(shape, e, saved.norm_weights, saved.mlp_in);
    t.mlp = (saved.down_proj_in ? 4 : 3) * f * e;
  }
  t.dropout_masks = dropout ? 2 * h : 0;
  t.norm_statistics = 2 * norm_statistics_per_norm(shape.norm);
  if (training.fused_attention) {
    t.attention_core = 4 * a;
  } else {
    // softmax output a s e; with dropout its 1-byte mask and the dropout output (Korthikanti: 2as^2b +
    // as^2b + 2as^2b = 5as^2b at e = 2).
    t.attention_core = sat_mul(a * (dropout ? 2 * e + 1 : e), training.seq_len);
  }
  return t;
}

ActivationBytes activation_bytes(const ModelDescription& model, const TrainingConfig& training,
                                 const MemoryInputs& in) {
  ActivationBytes out;
  const int e = in.activation_bytes;
  if (model.transformer) {
    const TransformerShape& shape = *model.transformer;
    const std::int64_t T = sat_mul(training.seq_len, training.micro_batch);
    out.tokens = T;
    out.layers = shape.layers;
    out.block_terms = block_activation_terms(shape, training, e);
    const Bytes full_block = out.block_terms.total();
    switch (training.checkpointing) {
      case Checkpointing::none:
        out.block_saved = sat_mul(full_block, T);
        break;
      case Checkpointing::selective:
        out.block_saved = sat_mul(full_block - selective_recomputed_per_token(shape, training, e, out.block_terms), T);
        break;
      case Checkpointing::full:  // only the block input kept (2sbh at e = 2)
        out.block_saved = sat_mul(shape.hidden * e, T);
        // The recomputed block's full set is live during its backward (its input is the kept checkpoint).
        out.recompute_live = sat_mul(full_block - shape.hidden * e, T);
        break;
    }
    out.saved_layers = sat_mul(out.block_saved, shape.layers);
    out.backward_working_set = sat_mul(backward_working_set_per_token(shape, training, e), T);
    out.embedding_dropout_mask = shape.dropout > 0.0 ? sat_mul(shape.hidden, T) : 0;
    // The final norm's input and output (its output the LM head's input); transformers': its fp32 input, and the
    // normalised value and output when the norm and the head train (a LoRA plan's are frozen; the output is kept
    // where DeepSpeed's stage-3 linear function runs the head).
    const Bytes final_norm =
        transformers_llama_modules(shape, training)
            ? transformers_norm_bytes(shape, e, !training.lora.enabled,
                                      !training.lora.enabled || zero3_linear_functions(training))
            : 2 * shape.hidden * e;
    out.final_norm = sat_mul(final_norm + norm_statistics_per_norm(shape.norm), T);
    out.logits = sat_mul(logits_per_token(shape, training, e), T);
  } else {
    // Layer list: activation_elements_per_sample per layer (the model description's own count).
    out.tokens = training.micro_batch;
    out.layers = static_cast<std::int64_t>(model.layers.size());
    std::int64_t elements = 0, largest = 0;
    for (const LayerDescription& layer : model.layers) {
      elements += layer.activation_elements_per_sample;
      largest = std::max(largest, layer.activation_elements_per_sample);
    }
    out.saved_layers = sat_mul(elements, training.micro_batch, e);
    // The gradient of the largest layer's output is the largest backward temporary of a layer list; cuDNN's
    // workspace is allocated beside it while a convolution's backward runs.
    out.backward_working_set = sat_mul(largest, training.micro_batch, e);
    out.convolution_workspace = in.convolution_workspace;
    // zeroplan's executor: the buffers its network plan allocates (exec/network_plan.h), its gradient slots as the
    // backward working set; its cuDNN workspace is a fixed allocation counted with its workspace.
    const auto executor = training.engine == TrainingEngine::zeroplan ? executor_network_allocations(model, training)
                                                                      : std::nullopt;
    if (executor) {
      out.saved_layers = out.backward_working_set = out.convolution_workspace = 0;
      for (const exec::DeviceAllocation& a : *executor) {
        if (a.component == "logits") out.logits = sat_add(out.logits, a.bytes);
        else if (a.component != "activations") continue;
        else if (a.what == exec::kActivationGradientsName) out.backward_working_set = a.bytes;
        else out.saved_layers = sat_add(out.saved_layers, a.bytes);
      }
    }
  }
  if (model.transformer && in.executor_grads_over_activations)
    out.gradient_partition_beyond = in.executor_grads_beyond_activations;
  out.total = sat_add(sat_add(sat_add(out.saved_layers, out.recompute_live), out.backward_working_set),
                      sat_add(sat_add(out.embedding_dropout_mask, out.final_norm), out.convolution_workspace));
  out.total = sat_add(out.total, out.gradient_partition_beyond);
  return out;
}

void explain_activations(const ModelDescription& model, const TrainingConfig& training, const MemoryInputs& in,
                         const ActivationBytes& b, std::vector<MemoryTerm>& terms) {
  const std::string e = num(in.activation_bytes);
  if (!model.transformer) {
    const auto executor = training.engine == TrainingEngine::zeroplan ? executor_network_allocations(model, training)
                                                                      : std::nullopt;
    if (executor) {
      for (const exec::DeviceAllocation& a : *executor)
        if (a.component == "activations" || a.component == "logits")
          terms.push_back({a.component, a.what, a.bytes, "the network plan at micro-batch " + num(training.micro_batch),
                           "zeroplan's executor (exec/network_plan.h, exec/activation_accounting.h network_device_layout)"});
      return;
    }
    terms.push_back({"activations", "saved activations (all layers)", b.saved_layers,
                     "sum(activation_elements_per_sample) * b * e = sum over " + num(b.layers) + " layers * " +
                         num(training.micro_batch) + " * " + e +
                         (training.checkpointing != Checkpointing::none
                              ? " (checkpointing is not modelled for layer-list models)"
                              : ""),
                     "model description (layer list)"});
    terms.push_back({"activations", "backward working set: gradient of the largest layer output",
                     b.backward_working_set, "max(activation_elements_per_sample) * b * e", "layer list"});
    if (b.convolution_workspace > 0)
      terms.push_back({"activations", "cuDNN's workspace during a convolution's backward", b.convolution_workspace,
                       "runtime.convolution_workspace_bytes",
                       "cluster description (measured: torch's allocator history); torch "
                       "aten/src/ATen/native/cudnn/Conv_v8.cpp allocates it around each call"});
    return;
  }
  const TransformerShape& shape = *model.transformer;
  const BlockActivationTerms& t = b.block_terms;
  const std::string T = num(b.tokens), L = num(b.layers), h = num(shape.hidden);
  const std::string sb = "s*b (" + num(training.seq_len) + " * " + num(training.micro_batch) + ")";
  const std::string per_block_list =
      "norm in/out " + num(t.norm_inputs_outputs) + " + QKV " + num(t.qkv) + " + attention out " +
      num(t.attention_output) + " + MLP " + num(t.mlp) + " + dropout masks " + num(t.dropout_masks) +
      " + norm stats " + num(t.norm_statistics) + " + attention core " + num(t.attention_core) + " (" +
      (training.fused_attention ? "fused: 4a fp32 logsumexp" : "unfused softmax") + ")";
  switch (training.checkpointing) {
    case Checkpointing::none:
      terms.push_back({"activations", "saved activations, " + L + " blocks", b.saved_layers,
                       "L * (" + per_block_list + ") B/token * " + sb + " = " + L + " * " + num(t.total()) +
                           " * " + T,
                       kKorthikanti});
      break;
    case Checkpointing::selective: {
      const bool ours = training.engine == TrainingEngine::zeroplan;
      terms.push_back(
          {"activations", "saved activations, " + L + " blocks (selective recompute)", b.saved_layers,
           "L * (" + per_block_list + (ours ? " - norm outputs 2he - activation output f e" : " - attention core") +
               ") B/token * " + sb + " = " + L + " * " + num(b.tokens == 0 ? 0 : b.block_saved / b.tokens) +
               " * " + T,
           ours ? "exec/exec_config.h ExecRecompute::selective (llm.c train_gpt2.cu recompute 2)"
                : kKorthikantiRecompute});
      break;
    }
    case Checkpointing::full:
      terms.push_back({"activations", "checkpointed block inputs, " + L + " blocks (full recompute)", b.saved_layers,
                       "L * h * e * s*b = " + L + " * " + h + " * " + e + " * " + T, kKorthikantiRecompute});
      terms.push_back({"activations", "one block's recomputed activations", b.recompute_live,
                       "(" + per_block_list + " - h*e) B/token * " + T, kKorthikantiRecompute});
      break;
  }
  const std::string per_token = num(b.tokens == 0 ? 0 : b.backward_working_set / b.tokens);
  if (training.engine == TrainingEngine::zeroplan)
    terms.push_back({"activations", "backward working set (gradient buffers reused by every layer)",
                     b.backward_working_set, "((max(f, h + 2kv) + 2h) e + 4a) * s*b = " + per_token + " * " + T,
                     "exec/cuda/cuda_trainer.cu allocate (residual, norm-input and FC/QKV gradients, row sums)"});
  else
    terms.push_back({"activations", "backward working set of one block (gradient temporaries)",
                     b.backward_working_set,
                     "max(MLP: (" + num(mlp_tensors(shape.activation)) + "f + 2h) e, attention: (3h + 2kv) e + " +
                         (training.fused_attention ? "4a" : "2 a s e") + ") * s*b = " + per_token + " * " + T,
                     "zeroplan (largest per-layer gradient temporaries)"});
  if (in.executor_grads_over_activations)
    terms.push_back({"activations",
                     "the gradient partition over the blocks' MLP tensors: its bytes past them (the head unit's chunks, "
                     "reduced before any block's backward frees its tensors)",
                     b.gradient_partition_beyond,
                     "the partition from the allocation's start in the backward's reduction order, each chunk ending "
                     "within the MLP tensors of the lowest block its bucket waits for; the chunks reduced before any "
                     "block's backward ahead of the blocks",
                     "exec/activation_accounting.h (mlp_saved_layout)"});
  if (b.embedding_dropout_mask > 0)
    terms.push_back({"activations", "embedding dropout mask", b.embedding_dropout_mask, "h * s*b = " + h + " * " + T,
                     kOutputLayer});
  terms.push_back({"activations", "final norm input, output and statistics", b.final_norm,
                   "(2 h e + " + num(norm_statistics_per_norm(shape.norm)) + ") * s*b = " +
                       num(2 * shape.hidden * in.activation_bytes + norm_statistics_per_norm(shape.norm)) + " * " + T,
                   kOutputLayer});
  std::string logits_formula;
  if (training.fused_cross_entropy)
    logits_formula = "V * e * s*b (fused cross entropy: dlogits in place) = " + num(shape.vocab_size) + " * " + e +
                     " * " + T;
  else
    logits_formula = "V * (2e" + std::string(training.fp32_loss ? " + 2*4 fp32 copy and its gradient" : "") +
                     ") * s*b = " + num(shape.vocab_size) + " * " +
                     num(2 * in.activation_bytes + (training.fp32_loss ? 8 : 0)) + " * " + T;
  terms.push_back({"logits", "logits and their gradient", b.logits, logits_formula, kOutputLayer});
}

}  // namespace zeroplan
