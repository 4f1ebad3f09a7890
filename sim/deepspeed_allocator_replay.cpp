#include "sim/deepspeed_allocator_replay.h"

#include <algorithm>
#include <array>
#include <cstdint>
#include <utility>
#include <vector>

#include "sim/activation_memory.h"
#include "sim/deepspeed_memory.h"
#include "sim/lora_model.h"
#include "sim/model_states_memory.h"
#include "sim/parameter_tensors.h"
#include "sim/saturating.h"
#include "sim/torch_caching_allocator.h"

namespace zeroplan {

namespace {

// torch.optim's Adam/AdamW (and DeepSpeed's FusedAdam) create their states lazily, at the first step, with
// torch.zeros_like of the parameter they update: exp_avg and exp_avg_sq (SGD: momentum_buffer).
void create_states(CachedSegments& cache, const MemoryInputs& in, std::int64_t params) {
  const Bytes states = optimizer_state_bytes(in, params);
  if (states <= 0) return;
  const int tensors = in.optimizer == OptimizerKind::sgd_momentum ? 1 : 2;
  for (int i = 0; i < tensors; ++i) cache.hold(states / tensors);
}

}  // namespace

// stage3.py _create_fp16_sub_groups: the trainable parameters in the model's order, a sub-group closed once it
// holds sub_group_size partition elements or more (so all but the last overshoot by part of one parameter); each
// parameter's partition is ceil(numel / world_size) (partition_parameters.py _partition_param). One sub-group when
// the partition is no larger than sub_group_size.
std::vector<std::int64_t> deepspeed_stage3_sub_groups(const ModelDescription& model, const TrainingConfig& training,
                                                     const MemoryInputs& in) {
  const std::int64_t limit = std::max<std::int64_t>(1, training.zero.sub_group_size);
  if (in.partition_params <= limit) return {in.partition_params};
  const std::int64_t world = std::max<std::int64_t>(1, in.world_size);
  std::vector<std::int64_t> groups;
  std::int64_t open = 0;
  const auto add_partition = [&](std::int64_t partition) {
    open = sat_add(open, partition);
    if (open >= limit) {
      groups.push_back(open);
      open = 0;
    }
  };
  const auto add = [&](std::int64_t numel) { add_partition(ceil_div(numel, world)); };
  if (training.lora.enabled) {
    for_each_adapter_tensor(model, training, add);
  } else {
    // A transformer's blocks have the same tensors: their partitions are taken from the first block walked (the
    // planner's searches ask for stage 3's sub-groups of an 80-block model for every configuration).
    std::vector<std::int64_t> block;
    for (const LayerDescription& layer : model.layers) {
      if (model.transformer && layer.kind == "transformer_block") {
        if (block.empty())
          for_each_parameter_tensor(model, layer, [&](std::int64_t numel) { block.push_back(ceil_div(numel, world)); });
        for (std::int64_t partition : block) add_partition(partition);
      } else {
        for_each_parameter_tensor(model, layer, add);
      }
    }
  }
  if (open > 0) groups.push_back(open);
  return groups;
}

// stage3.py reduce_independent_p_g_buckets_and_remove_grads: in the backward each gradient joins the ipg bucket, which
// is first reduced when it holds elements and this gradient would take it past reduce_bucket_size; what is left is
// reduced at the backward's end. The gradients come in the reverse of the forward's order of the trainable
// parameters (a transformer block's down, up and gate projections, o, v, k and q, then its norms). The bucket's fill
// sets each reduction's torch.cat (reduce_scatter_coalesced), so the fills in the order they come: Llama-2 7B at two
// ranks makes a 926 MiB copy first (the LM head, the last block and most of the one before) and a 944 MiB one later
// (memtrace-2026-11-30-l7-x2/).
std::vector<std::int64_t> deepspeed_stage3_reduce_bucket_fills(const ModelDescription& model,
                                                               const TrainingConfig& training) {
  std::vector<std::int64_t> tensors;
  for_each_trainable_tensor(model, training, [&](std::int64_t numel) { tensors.push_back(numel); });
  const std::int64_t limit = std::max<std::int64_t>(1, training.zero.reduce_bucket_size);
  std::vector<std::int64_t> fills;
  std::int64_t bucket = 0;
  for (auto it = tensors.rbegin(); it != tensors.rend(); ++it) {
    if (bucket > 0 && sat_add(bucket, *it) > limit) {
      fills.push_back(bucket);
      bucket = 0;
    }
    bucket = sat_add(bucket, *it);
  }
  if (bucket > 0) fills.push_back(bucket);
  return fills;
}

DeepSpeedCachedReserve deepspeed_flat_buffer_segments(const ModelDescription& model, const MemoryInputs& in,
                                                      const TrainingConfig& training, const DeepSpeedEnginePath& path,
                                                      const DeepSpeedGpuBytes& gpu, Bytes activation_block,
                                                      const LossTensorBytes& loss, Bytes device_free_bytes) {
  const TransientGpuBytes& t = gpu.transient;
  const ZeroConfig& zero = training.zero;
  const bool offload = offloads_optimizer(in);
  const std::int64_t Pp = in.partition_params;
  const std::vector<std::int64_t> sub_groups = path.wrapper == DeepSpeedOptimizerWrapper::zero_3 && !offload
                                                   ? deepspeed_stage3_sub_groups(model, training, in)
                                                   : std::vector<std::int64_t>{};
  // The shortest request made `early` below (CachedSegments::hold): the loss's tensors and the cuBLAS workspace,
  // stage 3's held buffers and the sub-groups' fp32 temporaries; the others are longer than the activation block.
  Bytes shortest_early = kRoundLarge;
  for (Bytes early : {loss.logits, loss.upcast, loss.log_probs, loss.embedding_grad, loss.backward_workspace,
                      gpu.held_buckets, gpu.held_grads})
    if (early > 0) shortest_early = std::min(shortest_early, early);
  for (std::int64_t n : sub_groups) shortest_early = std::min(shortest_early, sat_mul(4, n));
  CachedSegments cache(activation_block, shortest_early);
  CachedSegments side_stream(0);  // stage 3's reduce_and_partition_stream (transformers' rows, below)
  // deepspeed.initialize's leftovers (deepspeed_allocator_replay.h): the per-parameter 16-bit copies, by the caching
  // allocator's pools (c10/cuda/CUDACachingAllocator.cpp: under 1 MiB from 2 MiB small-pool segments, up to 10 MiB
  // from 20 MiB segments, larger ones a segment each rounded to 2 MiB), then the master partition's clone.
  Bytes init_idle = 0;
  // stage_1_and_2.py: flatten_on_accelerator when available_memory() >= the flat buffer, the 16-bit model on the
  // device already.
  const Bytes model_16bit = sat_mul(in.param_bytes, in.params);
  const bool flattens_on_device = path.wrapper == DeepSpeedOptimizerWrapper::bf16_optimizer ||
                                  (path.wrapper == DeepSpeedOptimizerWrapper::zero_1_2 &&
                                   device_free_bytes - model_16bit >= model_16bit);
  if (!training.deepspeed_empty_cache_after_init && flattens_on_device) {
    constexpr Bytes kMiB = 1024 * 1024;
    Bytes small_pool = 0, medium = 0;
    std::vector<int> large;
    const auto freed_copy = [&](std::int64_t numel) {
      const Bytes bytes = sat_mul(ceil_div(sat_mul(numel, in.param_bytes), Bytes{512}), Bytes{512});
      if (bytes < kMiB) small_pool = sat_add(small_pool, bytes);
      else if (bytes <= 10 * kMiB) medium = sat_add(medium, bytes);
      else if (bytes <= activation_block) init_idle = sat_add(init_idle, sat_mul(ceil_div(bytes, kRoundLarge), kRoundLarge));
      else large.push_back(cache.allocate(bytes, true));
    };
    // A LoRA plan flattens its trainable parameters only, the adapters.
    for_each_trainable_tensor(model, training, freed_copy);
    init_idle = sat_add(init_idle, sat_add(sat_mul(ceil_div(small_pool, 2 * kMiB), 2 * kMiB),
                                           sat_mul(ceil_div(medium, 20 * kMiB), 20 * kMiB)));
    for (int block : large) cache.release(block);
    cache.release(cache.allocate(sat_mul(in.param_bytes, Pp), true));
  }
  // transformers' modules (training.model_code; sim/activation_memory.cpp): the forward's saved tensors are many
  // blocks no larger than `activation_block` (TinyLlama-1.1B at 4 x 2,048: per layer the RMSNorms' fp32 inputs of
  // 64 MiB, the 32 MiB hidden-size outputs, the MLP's four 88 MiB tensors), which by best fit fill whatever the
  // cached segments have free (CachedSegments::fill_with_activations): the segments of the first step's loss, the
  // master clone's and the step's flat fp32 segments. Traced on one H200 (bench/deepspeed/results-pending/
  // memtrace-2026-11-29-hf/, tl_s1 and tl_s3): at the allocated peak 2.8-3.4 GiB of activations sit in the first
  // loss's 500 and 1000 MiB segments, 2.7 GiB (s1: the master clone's 2100 MiB segment and 736 MiB of a step
  // segment) and 1.1 GiB (s3: a step segment) in the others, and the loss's tensors take the step's fp32 segments
  // instead; the reserve is what those two segments have left (4.6 and 4.4 GiB of 6.5 and 4.7). The harness's GPT-2 keeps a few large tensors in segments of their own
  // (runtime.allocator_fragmentation_of_activations), replayed without them.
  const bool fluid_activations = training.model_code == ModelCode::transformers && model.transformer.has_value();
  Bytes forward_activations = 0, smallest_activation = 0;
  if (fluid_activations) {
    const ActivationBytes activations = activation_bytes(model, training, in);
    // What the forward holds at the loss: every layer's saved set, the embedding's mask and the final norm's
    // tensors (not the backward's recomputed block or working set).
    forward_activations = sat_add(activations.saved_layers,
                                  sat_add(activations.embedding_dropout_mask, activations.final_norm));
    // The smallest of the large saved tensors: the hidden states in the model's precision (modeling_llama.py
    // LlamaRMSNorm.forward's output, the attention output); a free block shorter than that takes none of them.
    smallest_activation = sat_mul(sat_mul(model.transformer->hidden, precision_bytes(training.precision)),
                                  activations.tokens);
  }
  // Stage 0's FP16_UnfusedOptimizer (bf16 or fp16 with an optimizer DeepSpeed does not fuse, as torch_adam's
  // torch.optim.AdamW) keeps one tensor per parameter, and deepspeed.initialize leaves the caching allocator what
  // initialize_optimizer_states freed (when the script does not empty it): unfused_optimizer.py __init__ clones an
  // fp32 master of every parameter (p.clone().float()), then initialize_optimizer_states sets a zero .grad on every
  // 16-bit parameter (torch.zeros(param.size(), dtype=param.dtype)) and on every fp32 master, runs
  // self.optimizer.step() (torch/optim/adam.py _init_group: exp_avg and exp_avg_sq, torch.zeros_like each parameter;
  // _multi_tensor_adam: torch._foreach_sqrt(exp_avg_sqs), an fp32 temporary per parameter) and drops every .grad:
  // 2P + 4P + 4P bytes of per-parameter segments free before the first forward (per_parameter_burst). Each step then
  // makes the same tensors again (the backward's .grad, step's fp32_param.grad = fp16_param.grad.to(fp32), the
  // foreach temporaries) in blocks of exactly their sizes, so no segment is added after the first step. The
  // forward's saved tensors take by best fit what they fit in (GPT-2 1.5B: one 25 MiB hidden-state tensor in each
  // 30 and 40 MiB segment, the 75 and 100 MiB ones in the embedding's 154 and 308 MiB ones); the rest of these
  // segments is the reserve at the peak, beside the slack of the live per-parameter segments (the 16-bit
  // parameters, masters and Adam states: GPT-2 1.5B's 39.1 MiB tensors in 40 MiB segments). Traced on one H200,
  // bench/deepspeed/results-pending/memtrace-2026-11-29-stage0/ (memtrace_segments.py): GPT-2 1.5B has 9.45 GiB free
  // at the allocated peak, 8.22 of it in the freed per-parameter segments and 0.51 the live ones' slack (replayed:
  // 8.27 and 0.50); TinyLlama-1.1B 5.42, 4.86 and 0.03 (replayed: 4.87 and 0.10). A layer list (ResNet) names no
  // activation tensors to place and is left as it was (not traced; ResNet-101 on four H200 with the cache kept
  // measured 2.95 GiB device used, 0.07 above two H200 with it emptied: its segments are not left idle as these).
  const bool per_parameter = path.wrapper == DeepSpeedOptimizerWrapper::fp16_unfused &&
                             !training.deepspeed_empty_cache_after_init && model.transformer.has_value();
  SizeClasses init_free;          // what initialize_optimizer_states left free
  SizeClasses init_free_held;     // the same with the 16-bit .grad held (gradient accumulation's later micro-steps)
  Bytes per_parameter_slack = 0;  // the slack of the live per-parameter segments
  struct Request {
    Bytes bytes;
    std::int64_t count;  // per transformer block
  };
  std::array<Request, 8> block_requests{};
  int block_request_count = 0;
  std::int64_t blocks = 0;
  // LlamaRMSNorm.forward's fp32 temporaries (.pow(2) and the product with rsqrt: 4h bytes per token each, freed
  // within the norm) get segments of their own in the first forward. The final norm's are freed just before the LM
  // head, so the LM head's backward finds such a segment free (see the cuBLAS workspace in loss_pass): Qwen2-1.5B's
  // 48 MiB one (modeling_qwen2.py:250-251) holds the workspace in its one-rank stage-3 trace
  // (memtrace-2026-11-30-q15/), TinyLlama-1.1B's 64 MiB ones in its traces (a hidden-state tensor later takes
  // half of such a segment: three such rests free at the loss in the LoRA row's stage-3 trace).
  Bytes norm_temporary_segment = 0;
  if (fluid_activations && model.transformer->norm == NormKind::rms_norm)
    norm_temporary_segment = sat_mul(sat_mul(4, model.transformer->hidden),
                                     sat_mul(training.seq_len, training.micro_batch));
  // What of such a segment best fit can offer the cuBLAS workspace: a non-final norm's rest beside its hidden-state
  // tensor ((4 - e) h bytes a token) where that is long enough, else the final norm's whole segment. And the query's
  // half in the model's precision (modeling_llama.py rotate_half: x1, x2, -x2 of h e / 2 bytes a token, freed within
  // the attention).
  const Bytes tokens = sat_mul(training.seq_len, training.micro_batch);
  const Bytes norm_temporary_rest =
      fluid_activations ? sat_mul(sat_mul(std::max(0, 4 - in.activation_bytes), model.transformer->hidden), tokens) : 0;
  const Bytes norm_temporary_free =
      norm_temporary_rest >= loss.backward_workspace ? norm_temporary_rest : norm_temporary_segment;
  const Bytes rotary_half =
      fluid_activations
          ? sat_mul(ceil_div(sat_mul(model.transformer->hidden, in.activation_bytes), Bytes{2}), tokens)
          : 0;
  if (per_parameter) {
    const auto each_tensor = [&](auto&& tensor) { for_each_trainable_tensor(model, training, tensor); };
    const int e = in.param_bytes;
    const int states = in.optimizer == OptimizerKind::adamw ? 2 : in.optimizer == OptimizerKind::sgd_momentum ? 1 : 0;
    // Live from initialize on: the 16-bit parameters (engine.py _configure_distributed_model module.to, or the
    // script's from_pretrained), the fp32 masters and the states.
    for (const PerParameterBurst& live : {per_parameter_burst(each_tensor, e, 1, nullptr),
                              per_parameter_burst(each_tensor, 4, 1, nullptr),
                              per_parameter_burst(each_tensor, 4, states, nullptr)})
      per_parameter_slack = sat_add(per_parameter_slack, live.segments - live.tensors);
    // Freed by initialize_optimizer_states: the zero gradients (16-bit, fp32) and the foreach step's temporaries.
    per_parameter_burst(each_tensor, e, 1, &init_free);
    for (SizeClasses* free : {&init_free, &init_free_held}) {
      per_parameter_burst(each_tensor, 4, 1, free);
      if (adam_temporaries(in, path, 1) > 0) per_parameter_burst(each_tensor, 4, 1, free);
    }
    // The forward's saved tensors of the model's hidden, QKV and MLP widths, one transformer block's in its order
    // (sim/activation_memory.h block terms: per token, so many tensors of s*b tokens each); the norm statistics,
    // dropout masks and attention's logsumexp are small-pool blocks. transformers' RMSNorms keep their fp32 input
    // (modeling_llama.py LlamaRMSNorm: hidden_states.to(torch.float32)); the harness's GPT-2 its fused QKV output.
    if (model.transformer) {
      const ActivationBytes activations = activation_bytes(model, training, in);
      const TransformerShape& shape = *model.transformer;
      const std::int64_t T = activations.tokens, h = shape.hidden, f = shape.ffn_hidden, kv = shape.kv_dim();
      const int a = in.activation_bytes;
      const BlockActivationTerms& terms = activations.block_terms;
      const bool llama = training.model_code == ModelCode::transformers && shape.norm == NormKind::rms_norm;
      const auto add = [&](Bytes per_token, std::int64_t count) {
        if (per_token > 0 && count > 0 && block_request_count < static_cast<int>(block_requests.size()))
          block_requests[static_cast<std::size_t>(block_request_count++)] = {sat_mul(per_token, T), count};
      };
      blocks = activations.layers;
      if (training.checkpointing == Checkpointing::full) {
        add(h * a, 1);  // the block's input, its checkpoint
      } else {
        const std::int64_t norm_fp32 = llama ? 2 : 0;
        const std::int64_t norm_outputs = (terms.norm_inputs_outputs - norm_fp32 * 4 * h) / (h * a);
        add(4 * h, norm_fp32);
        add(h * a, norm_outputs / 2);
        if (llama) {
          add(h * a, 1);
          add(kv * a, 2);
        } else {
          add(terms.qkv, 1);
        }
        add(h * a, terms.attention_output / (h * a));
        add(h * a, norm_outputs - norm_outputs / 2);
        add(f * a, terms.mlp / (f * a));
      }
    }
  }
  SizeClasses per_parameter_segments;  // this step's: initialize's free blocks as the step's forward takes them
  const auto forward = [&](bool grads_held) {
    Bytes placed = 0;
    if (per_parameter) {
      // Each step's forward finds initialize's free blocks as the one before it did (its activations, .grad and
      // step tensors all freed), and its own segments of the rest.
      per_parameter_segments = grads_held ? init_free_held : init_free;
      const Bytes before = per_parameter_segments.used_bytes();
      for (std::int64_t block = 0; block < blocks; ++block)
        for (int r = 0; r < block_request_count; ++r) {
          const Request& request = block_requests[static_cast<std::size_t>(r)];
          for (std::int64_t i = 0; i < request.count; ++i) per_parameter_segments.take(request.bytes);
        }
      placed = per_parameter_segments.used_bytes() - before;
    }
    if (fluid_activations)
      cache.fill_with_activations(std::max<Bytes>(0, forward_activations - placed), smallest_activation);
  };
  const auto release_forward = [&]() {
    if (fluid_activations) cache.release_activations();
  };
  // The optimizers' initialize_optimizer_states: a zero fp32 gradient of the partition (stage_1_and_2.py:
  // torch.zeros(partition_size)) or of the largest sub-group (stage3.py: gradient_buffer), set as the master's
  // .grad and dropped at its end (group.grad = None) when the optimizer is on the GPU: a free segment the first
  // forward's activations take. transformers' rows (the traces above: the first step's activation segments are what
  // its forward could not carve from that segment and the master clone's).
  if (fluid_activations && !training.deepspeed_empty_cache_after_init && !offload) {
    if (path.wrapper == DeepSpeedOptimizerWrapper::zero_1_2) {
      cache.release(cache.allocate(sat_mul(4, Pp), true));
    } else if (path.wrapper == DeepSpeedOptimizerWrapper::zero_3) {
      // stage3.py _setup_for_real_optimizer, in DeepSpeed 0.19.8's order (the frames of the two-rank trace,
      // memtrace-2026-11-30-hf-x2/): _create_fp32_partitions makes each sub-group's fp32 master (stage3.py:1172)
      // from an fp32 temporary (:1170) held in a loop variable, so a sub-group's temporary is freed once the next
      // one's exists, the last at the function's end; then initialize_optimizer_states' gradient buffer of the
      // largest sub-group (:1306, freed), the reduce bucket (:782, with contiguous_gradients) and
      // grad_partitions_flat_buffer (:791), both held for the run. Best fit decides what the first forward finds
      // free: at two ranks TinyLlama-1.1B's one sub-group puts the buffer in the temporary's 2100 MiB segment and
      // the bucket and flat gradients in it after (97 MiB left); at one rank the second sub-group's temporary makes
      // a segment of its own (340 MiB), its master takes the first temporary's segment, the buffer (3858 MiB) no
      // longer fits there and makes a segment free for the first forward, and the bucket and flat gradients follow
      // the master (the one-rank trace's final segments, memtrace-2026-11-29-hf/: 338 + 953.7 + 2098.2 MiB and 470
      // free of 3860, and a 340 MiB one).
      std::int64_t largest = 0;
      int temporary = -1;
      for (std::int64_t n : sub_groups) {
        const int next = cache.allocate(sat_mul(4, n), true);
        cache.release(temporary);  // the loop's local rebound only once the next temporary exists
        temporary = next;
        cache.hold(sat_mul(4, n), true);  // the master partition
        largest = std::max(largest, n);
      }
      cache.release(temporary);
      cache.release(cache.allocate(sat_mul(4, largest), true));
      cache.hold(gpu.held_buckets, true);
      cache.hold(gpu.held_grads, true);
    }
  }
  // The loss of a micro-step, up to the allocated peak (its backward, three log_probs-sized tensors live) when
  // `peak` is given (its free bytes then), and on to its end otherwise; the first step's LM-head backward also
  // makes autograd's cuBLAS workspace, kept from then on.
  // `held_grad`: where stages 0-1 accumulate (accumulates_in_grads below), the first micro-step's embedding .grad
  // is kept there to the boundary; later micro-steps' LM-head gradients are added into it and freed.
  const auto loss_pass = [&](bool first, Bytes* peak, int* held_grad) {
    if (loss.log_probs <= 0) return;
    const int logits = cache.allocate(loss.logits, true);
    const int upcast = cache.allocate(loss.upcast, true);
    const int log_probs = cache.allocate(loss.log_probs, true);
    cache.release(upcast);
    cache.release(logits);  // the forward returns the loss alone
    const int nll_grad = cache.allocate(loss.log_probs, true);
    const int input_grad = cache.allocate(loss.log_probs, true);
    if (peak) {
      *peak = sat_add(cache.idle_bytes(),
                      per_parameter ? sat_add(per_parameter_segments.idle_bytes(), per_parameter_slack) : 0);
      return;
    }
    cache.release(nll_grad);
    cache.release(log_probs);
    const int logits_grad = loss.upcast > 0 ? cache.allocate(loss.logits, true) : -1;
    cache.release(input_grad);
    const int embedding_grad = cache.allocate(loss.embedding_grad, true);
    // autograd's cuBLAS workspace (first step): best fit takes a per-parameter block where one is large enough
    // (GPT-2 1.5B: a free 40 MiB segment of the fp32 zero gradients, traced), held there from then on.
    if (first && per_parameter && per_parameter_segments.best_fit(loss.backward_workspace) > 0) {
      per_parameter_segments.take(loss.backward_workspace);
      init_free.take(loss.backward_workspace);
      init_free_held.take(loss.backward_workspace);
    } else if (first && rotary_half >= loss.backward_workspace && rotary_half < norm_temporary_free &&
               cache.hold_among_activations(loss.backward_workspace)) {
      // Smaller still: a hole rotate_half's temporaries (the query's halves) left where the first forward carved its
      // activations from a cached block. Llama-2 7B on two H200, 4 x 2048 (memtrace-2026-11-30-l7-x2/): free blocks
      // of 32 MiB (such a hole in the freed gradient buffer's 3830 MiB segment), 64 (a norm temporary's rest), 64 and
      // 128 MiB (the final norm's temporary) at the workspace's request, which takes the 32 MiB hole; held there, it
      // keeps the step's 3820 MiB fp32 gradient out of that segment, which stays the later forwards'.
    } else if (first && norm_temporary_segment >= loss.backward_workspace) {
      // Else the final norm's free temporary segment (norm_temporary_segment) is the best fit, not a loss segment:
      // the workspace sits among the activations' own segments (TinyLlama-1.1B and Qwen2-1.5B, traced: every loss
      // segment holds a loss tensor at the peak). Qwen2-0.5B's (28 MiB) is smaller than the workspace.
    } else if (first) {
      cache.allocate(loss.backward_workspace, true);
    }
    cache.release(logits_grad);
    if (held_grad && *held_grad < 0) {
      *held_grad = embedding_grad;
      return;
    }
    cache.release(embedding_grad);  // reduced into the buckets or the step's copies, freed by the step
  };
  // What a micro-step's backward allocates after its loss and what it holds to the accumulation boundary: the stage
  // 1-2 ipg buckets (setup_buckets, at the first gradient hook; released by _release_ipg_buffers at the epilogue of
  // a backward that reduces: every micro-step at stage 2, partition_gradients, only the boundary's at stage 1), one
  // reduction's flat copy (allreduce_bucket: self.flatten(bucket); reduce_scatter_coalesced: torch.cat), and the
  // stage 1-2 gradient partition (copy_grads_in_partition: torch.empty at the first reduction, held to the step).
  // With gradient accumulation the first micro-step's stage-1 bucket and stage-2 partition are live at the next
  // micro-step's loss, in the segments the loss had (GPT-2 350M, accumulation 4, one H200: the 953.7 MiB bucket in a
  // 1572 MiB loss segment at stage 1, the 676.9 MiB partition in the 786 MiB logits segment at stage 2,
  // bench/deepspeed/results-pending/memtrace-2026-11-26-a4/). The .grad tensors stages 0-1 keep between micro-steps
  // take the activations' blocks; where the activations they displace go is replayed below (displace_activations).
  struct Held {
    std::vector<int> buckets;
    int partition = -1;
  };
  const int micro_steps = static_cast<int>(std::max<std::int64_t>(1, training.grad_accum));
  const bool reduces_every_micro_step = in.stage >= 2;
  const std::vector<std::int64_t> reduce_fills = fluid_activations && path.wrapper == DeepSpeedOptimizerWrapper::zero_3
                                                     ? deepspeed_stage3_reduce_bucket_fills(model, training)
                                                     : std::vector<std::int64_t>{};
  const auto backward = [&](int micro, Held& held) {
    const bool reduces = reduces_every_micro_step || micro + 1 == micro_steps;
    const int bucket_count = zero.overlap_comm ? 2 : 1;
    if (t.backward_buckets > 0 && held.buckets.empty())
      for (int i = 0; i < bucket_count; ++i) held.buckets.push_back(cache.allocate(t.backward_buckets / bucket_count));
    release_forward();  // the backward frees them layer by layer before the first reduction's buffers
    if (!reduces) return;
    // Stage 3 reduces on its own stream (stage3.py __reduce_and_partition_ipg_grads under
    // reduce_and_partition_stream): the allocator keeps that stream's blocks apart (a block's stream is part of its
    // pool key, c10/cuda/CUDACachingAllocator.cpp), so torch.cat's segment is idle at the default stream's peak and
    // no forward's activation takes it (the 948 MiB segment of the tl_s3 trace).
    if (fluid_activations && path.wrapper == DeepSpeedOptimizerWrapper::zero_3) {
      // One copy per bucket reduced (deepspeed_stage3_reduce_bucket_fills): a later, fuller bucket's copy is larger
      // than the first one's segment and makes a second (Llama-2 7B on two H200: 928 and 946 MiB segments).
      for (std::int64_t n : reduce_fills) {
        Bytes copy = sat_mul(path.communication_bytes, n);
        if (path.communication_bytes != path.accumulation_bytes)
          copy = sat_add(copy, sat_mul(path.accumulation_bytes, ceil_div(n, std::max<std::int64_t>(1, in.world_size))));
        side_stream.release(side_stream.allocate(copy, true));
      }
    } else {
      const int copy = cache.allocate(t.reduction_copy);
      cache.release(copy);
    }
    if (held.partition < 0) held.partition = cache.allocate(t.grad_partition);
    for (int bucket : held.buckets) cache.release(bucket);
    held.buckets.clear();
  };
  // Stages 0-1 keep every parameter's .grad from the first micro-step's backward to the accumulation boundary
  // (engine.py allreduce_gradients; stage_1_and_2.py reduces at the boundary when partition_gradients is off);
  // stage 2 reduces and frees them in each micro-step's hooks, BF16_Optimizer adds them into its fp32 buffer every
  // micro-step (bf16_optimizer.py update_hp_grads) and stage 3 partitions them. Held, the .grad tensors keep blocks
  // the next micro-step's forward would have taken for its activations, so as many bytes of its activations are
  // served from the cached segments before its loss: by best fit, the free loss-sized segments, so that its loss
  // takes others, made in the first step before the optimizer's segments existed. GPT-2 1.5B, stage 1, accumulation
  // 4, one H200 (bench/deepspeed/results-pending/memtrace-2026-11-26-a4/1.5b): the second micro-step's activations
  // fill two free 786 MiB and one 1572 MiB loss segment (3.1 GB, the model's 16-bit .grad), its loss takes two
  // 1572 MiB segments of its own, and the step's fp32 segments stay idle at the peak. Replayed as activation-block
  // requests (the largest activation; at most kDisplacedRequests, larger ones for a model whose .grad exceed that).
  // The embedding's .grad, made in the LM head's backward from the cached segments, is held there instead.
  const bool accumulates_in_grads = micro_steps > 1 && in.stage < 2 &&
                                    path.wrapper != DeepSpeedOptimizerWrapper::bf16_optimizer &&
                                    path.wrapper != DeepSpeedOptimizerWrapper::zero_3;
  constexpr int kDisplacedRequests = 48;
  struct Displaced {
    std::array<int, kDisplacedRequests> blocks{};
    int count = 0;
  };
  // With stage 0's per-parameter segments kept (per_parameter above) the held .grad tensors take the blocks of
  // initialize's zero 16-bit gradients, exactly their sizes, and displace none.
  const Bytes displaced_bytes =
      accumulates_in_grads && !per_parameter ? std::max<Bytes>(0, t.backward_grads - (loss.log_probs > 0 ? loss.embedding_grad : 0)) : 0;
  const Bytes displaced_request =
      activation_block > 0 ? std::max(activation_block, ceil_div(displaced_bytes, Bytes{kDisplacedRequests})) : 0;
  const auto displace_activations = [&](Displaced& displaced) {
    if (displaced_request <= 0) return;
    for (Bytes left = displaced_bytes; left > 0 && displaced.count < kDisplacedRequests; left -= displaced_request)
      displaced.blocks[static_cast<std::size_t>(displaced.count++)] =
          cache.allocate(std::min(left, displaced_request), true);
  };
  const auto release_displaced = [&](Displaced& displaced) {  // with the activations, in its backward
    for (int i = 0; i < displaced.count; ++i) cache.release(displaced.blocks[static_cast<std::size_t>(i)]);
    displaced.count = 0;
  };
  // One training step in DeepSpeed's order of allocation and release; the first creates the optimizer states.
  const auto step = [&](bool first) {
    Held held;
    CachedSegments::FreeSizes before;
    int held_grad = -1;
    for (int micro = 0; micro < micro_steps; ++micro) {
      Displaced displaced;
      if (micro > 0) displace_activations(displaced);
      forward(accumulates_in_grads && micro > 0);
      loss_pass(first && micro == 0, nullptr, accumulates_in_grads ? &held_grad : nullptr);
      backward(micro, held);
      release_displaced(displaced);
      // The micro-steps before the boundary are alike (as the optimizer's full sub-groups below): once one leaves
      // the free blocks as the one before it did, so does every later one up to the boundary, which is replayed.
      if (micro >= 1 && micro + 2 < micro_steps) {
        const CachedSegments::FreeSizes after = cache.free_sizes();
        if (micro >= 2 && after == before) micro = micro_steps - 2;
        before = after;
      }
    }
    cache.release(held_grad);  // reduced at the boundary (stage 1 copies it into the partition), freed by the step
    const int partition = held.partition;
    switch (path.wrapper) {
      case DeepSpeedOptimizerWrapper::plain:
      case DeepSpeedOptimizerWrapper::fp16_unfused:
        // Per-parameter fp32 gradients, states and temporaries (torch's foreach lists): none larger than one
        // parameter's fp32 copy, carved from the freed activations' blocks (their fragmentation is the cluster's
        // runtime.allocator_fragmentation_of_activations).
        return;
      case DeepSpeedOptimizerWrapper::fp16_fused: {
        // FP16_Optimizer.step: the fp32 gradients flattened into one tensor for the flat fp32 master.
        const int flat = cache.allocate(sat_mul(4, in.params));
        if (first) create_states(cache, in, in.params);
        cache.release(flat);
        return;
      }
      case DeepSpeedOptimizerWrapper::bf16_optimizer: {
        if (first) create_states(cache, in, Pp);
        const int temporary = cache.allocate(t.step_temporaries);
        cache.release(temporary);
        return;
      }
      case DeepSpeedOptimizerWrapper::zero_1_2: {
        if (offload) return;  // DeepSpeedCPUAdam steps on the host
        // step(): single_grad_partition = flatten(averaged_gradients).to(fp32): the flat copy in the gradients'
        // dtype, then its fp32 conversion; the flat copy and the gradient partition are freed before the
        // optimizer step (free_grad_in_param_list), the fp32 gradient after it.
        const Bytes fp32_grad = t.step_grads > 0 ? sat_mul(4, Pp) : 0;
        const int flat = cache.allocate(t.step_grads - fp32_grad);
        const int grad = cache.allocate(fp32_grad);
        cache.release(flat);
        cache.release(partition);
        if (first) create_states(cache, in, Pp);
        const int temporary = cache.allocate(t.step_temporaries);
        cache.release(temporary);
        cache.release(grad);
        return;
      }
      case DeepSpeedOptimizerWrapper::zero_3: {
        if (offload) return;
        // stage3.py step, sub-group by sub-group (_prepare_sub_group .. _release_sub_group): the flattened
        // gradient partitions (torch.cat in the accumulation dtype) and their fp32 conversion, the flat copy freed
        // once converted; the optimizer step (the first creates the states) with torch AdamW's temporary; the fp32
        // gradient freed at the end, for each sub-group (deepspeed_stage3_sub_groups).
        // A sub-group no larger than one replayed before fits its buffers in the blocks that one's left: once such a
        // sub-group leaves the free blocks as they were, every later one no larger does the same (its states, held,
        // take the blocks the same way), so the replay skips them up to the next larger one. Sub-groups overshoot
        // sub_group_size by different parts of a tensor, so their sizes rarely repeat exactly.
        const int a = path.accumulation_bytes;
        const auto replay = [&](std::int64_t n) {
          const int flat = cache.allocate(sat_mul(a, n));
          const int grad = a == 4 ? flat : cache.allocate(sat_mul(4, n));
          if (grad != flat) cache.release(flat);
          if (first) create_states(cache, in, n);
          const int temporary = cache.allocate(adam_temporaries(in, path, n));
          cache.release(temporary);
          cache.release(grad);
        };
        CachedSegments::FreeSizes before;
        bool compared = false, steady = false;
        std::int64_t largest = 0;
        for (std::size_t k = 0; k < sub_groups.size(); ++k) {
          const std::int64_t n = sub_groups[k];
          if (n > largest) steady = false;
          if (steady) continue;
          const bool fits_an_earlier_one = n <= largest;
          replay(n);
          largest = std::max(largest, n);
          if (k + 1 < sub_groups.size()) {  // a model of one sub-group compares nothing
            const CachedSegments::FreeSizes after = cache.free_sizes();
            steady = fits_an_earlier_one && compared && after == before;
            before = after;
            compared = true;
          }
        }
        return;
      }
    }
  };
  step(true);
  step(false);
  if (loss.log_probs > 0) {
    // The allocated peak is the loss's backward of a micro-step after the first where there are several: what the
    // first one's backward holds is live beside it.
    if (micro_steps > 1) {
      Held held;  // live to the end of this replay: the peak is taken beside it
      int held_grad = -1;
      forward(false);
      loss_pass(false, nullptr, accumulates_in_grads ? &held_grad : nullptr);
      backward(0, held);
      Displaced displaced;  // the next micro-step's forward
      displace_activations(displaced);
    }
    Bytes at_loss = 0;
    forward(accumulates_in_grads && micro_steps > 1);
    loss_pass(false, &at_loss, nullptr);
    return {sat_add(sat_add(sat_add(at_loss, side_stream.idle_bytes()), init_idle), in.deepspeed_process_device_extra),
            at_loss};
  }
  // The step's peak is in the backward pass, with the activations still live: stage_1_and_2.py setup_buckets
  // allocates the reduce buckets at the first gradient hook (torch.empty(reduce_bucket_size), released only at the
  // epilogue), so at the peak the next step's buckets hold their blocks of the cached segments (best fit, as the
  // allocator serves them) and only the rest is idle. A model smaller than the bucket leaves the bucket's segment
  // idle after the step, not at the peak (ResNet-101 at stage 1: 1.63 GiB idle after the step, 0.70 GiB at the
  // peak; 0.76 GiB measured as peak reserved less peak allocated).
  if (t.backward_buckets > 0) {
    const int bucket_count = zero.overlap_comm ? 2 : 1;
    for (int i = 0; i < bucket_count; ++i) cache.allocate(t.backward_buckets / bucket_count);
  }
  Displaced displaced;  // a later micro-step's, live in its backward
  displace_activations(displaced);
  return {sat_add(sat_add(cache.idle_bytes(), init_idle), in.deepspeed_process_device_extra), 0};
}

Bytes deepspeed_overflow_test_segments(const MemoryInputs& in, const TrainingConfig& training,
                                       const DeepSpeedEnginePath& path) {
  if (in.stage != 3 || training.precision != Precision::fp16 || offloads_optimizer(in)) return 0;
  CachedSegments side_stream(0);  // nothing of the default stream's activation blocks is reachable from it
  const std::int64_t Pp = in.partition_params;
  const int magnitude = side_stream.allocate(sat_mul(path.accumulation_bytes, Pp), true);  // self.abs()
  const int inf_mask = side_stream.allocate(Pp, true);                                     // == inf
  side_stream.release(magnitude);
  side_stream.release(inf_mask);
  side_stream.release(side_stream.allocate(Pp, true));  // isnan: self != self
  return side_stream.idle_bytes();
}

}  // namespace zeroplan
