// What the CUDA executor allocates, per planner component, as closed-form byte counts. The CUDA trainer's
// allocator measures the same buffers; a GPU test checks the two agree exactly, and the planner
// (sim/memory_model) is meant to model these formulas.
//
// Notation: B micro-batch, T sequence, C hidden, L layers, a heads, HS head size, q = a*HS, qkv = q + 2*kv_heads*HS,
// F the MLP's inner width, FI its first projection's rows (F for GELU, 2F for SwiGLU's gate and up), Vp padded
// vocabulary, P = flat parameter count (padded vocabulary rows included), e = element bytes (2 for bf16/fp16, 4
// for fp32), n = norm statistics per norm (2: LayerNorm's mean and rstd; 1: RMSNorm's rstd).
//
// params            e*P                     (16-bit model weights; fp32 in fp32 mode; stage 3 the partition e*P/N,
//                                            none with the fp32 master on the device: stage3_gathers_cast_master)
// grads             e*P                     (gradients in the model precision, accumulated over micro-steps; stages
//                                            2-3 the partition e*P/N, none where it lies over the MLP tensors:
//                                            mlp_saved_layout, whose bytes ahead of the blocks count as activations)
// master_params     4*P in bf16/fp16, 0 in fp32 (fp32 master weights)
// optimizer_states  8*P                     (AdamW momentum and variance, fp32)
// activations       saved for backward, no recompute: per layer, the tensors Korthikanti et al. 2022
//                   (arXiv 2205.05198, sec. 4.1) count without dropout, in the block's kinds:
//                     norm 1 input e*sbh, norm 1 output e*sbh, QKV e*sb*qkv, attention output e*sb*q, norm 2
//                     input e*sbh, norm 2 output e*sbh, MLP pre-activation e*sb*FI, MLP activation e*sb*F
//                     (GPT-2: 16e*sbh; Llama 7B, F = 2.69h: 14.1e*sbh)
//                     + the norms' statistics, fp32                                   = 8n*sb
//                     + flash-attention logsumexp, fp32 (replaces the 5as^2b softmax)  = 4*a*s*b
//                   plus the output layer: final-norm input and output 2e*sbh and its statistics 4n*sb;
//                   selective recompute: per layer the list above less norm 1 output, norm 2 output and MLP
//                   activation, rebuilt in backward inside the backward working set below;
//                   full recompute: every block's input (L+1)*e*sbh (the last is the final-norm input), plus one
//                   block's recompute buffers (the list above less the norm 1 input), plus the final-norm output
//                   and statistics;
//                   plus, in both modes, the backward working set (live at the backward peak, as the planner's
//                   activation component counts it): dresidual e*sbh, d(norm input) e*sb*max(h, q), d(MLP/QKV)
//                   e*sb*max(qkv, F), and the flash-attention D = rowsum(dO*O) 4*a*s*b (fp32).
// logits            e*s*b*Vp (the fused cross-entropy writes dlogits in place) + 4*s*b (per-token losses, fp32)
// workspace         bias/norm-gradient partials and their counter 4*(W+1), W = column_sum_width (--deterministic:
//                   one W row per 256 rows of s*b, and the token positions of the ordered dwte 4*(3sb+1)),
//                   grad-norm partials and result (kNormPartials + 1 floats), the ZeRO engine's norm slots
//                   (kNormSlots floats), the micro-batch's input and target token ids 8*s*b (int32), the RoPE
//                   cos/sin tables 4*T*HS (rotary models), and the cuBLASLt workspace (32 MiB, customary on Hopper)
//
// LoRA (ExecConfig::lora; exec/cuda/cuda_trainer.cu, as the CPU trainer counts the same tensors): two ZeRO engines,
// each with its device's gradient-norm buffers (workspace, twice): the frozen base's (params only, e*P_base with
// P_base the model's layout less the block weights under NF4; at stage 3 its partition and gathered units, no
// grads, master or moments) and the adapters' (every state of P_A = lora_adapter_params, aligned). No ordered-dwte
// token positions (the embeddings are frozen). The trainer adds
// activations  x A^T of every adapted module per kept block e*nb*m*sb*r (m adapted modules of a block, r the rank,
//              nb = L, or 1 under full recompute, which rebuilds them) and, in the backward working set, the
//              d(x A^T) of the most adapters of one block weight e*k*sb*r (k = 3 for q, k and v on the fused qkv)
// params       --quantize-base nf4: every block weight's NF4 codes and constants, per transformers module as
//              bitsandbytes holds them (exec/lora_layout.h nf4_module_elements: Llama's qkv as q, k and v, gate_up
//              as gate and up; core/nf4_quantization.h nf4_tensor_bytes of each module: n/2 codes, n/64 absmax
//              codes, 4 per 256 blocks and the offset) and one dequantised
//              weight e*(the largest block weight), the scratch every base GEMM reads (the CPU trainer counts its
//              fp32 scratch under params too, and the planner's sim/lora_model.h the dequantised weight beside the
//              codes)
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "exec/exec_config.h"
#include "exec/network_plan.h"

namespace zeroplan::exec {

inline constexpr std::int64_t kCublasWorkspaceBytes = 32ll << 20;
// cuDNN's convolution workspace of a layer-list network (exec/cuda/cudnn_conv.cuh): fixed, so that the device memory
// is known before the run; the algorithm search keeps to it. 64 MiB holds the fastest algorithms of every ResNet-101
// convolution at micro-batch 128 on 32x32 images.
inline constexpr std::int64_t kCudnnWorkspaceBytes = 64ll << 20;
// cuDNN's fused flash attention (exec/cuda/cudnn_attention.cuh), which the CUDA trainer uses in place of its own
// attention kernels where cuDNN plans it: a fixed workspace, stated here so that the device memory is known before
// the run. The graph's fp32 buffers (rowsum(dO*O), B*NH*T floats; without --deterministic the dQ accumulator,
// B*NH*T*HS floats) and the engines' own workspace, at most kCudnnAttentionEngineWorkspaceBytes (an engine wanting
// more is skipped), and with grouped-query attention (NKV < NH) one B*NH*T*HS fp32 tensor more, which cuDNN 9.14's
// fused backward engines ask for before reducing dK and dV over a group's heads (measured on one H200, 2026-11-29:
// 67,109,120 B at TinyLlama's and Llama-3 8B's shapes, 58,720,512 B at Qwen2 7B's, each 4*B*NH*T*HS + 256; without
// it every engine was refused, bench/llama/results/2026-11-29-h200x1-cudnn-attention); deterministic, the dP buffer
// of cuDNN's deterministic Hopper backward besides (B*NH*T'^2 bf16, T' = T rounded up to 128).
inline constexpr std::int64_t kCudnnAttentionEngineWorkspaceBytes = 32ll << 20;
inline std::int64_t cudnn_attention_workspace_bytes(std::int64_t B, std::int64_t T, std::int64_t NH, std::int64_t NKV,
                                                    std::int64_t HS, bool deterministic) {
  const std::int64_t rows = B * NH * T, t = (T + 127) / 128 * 128;
  const std::int64_t grouped = NKV < NH ? 4 * rows * HS : 0;
  return 4 * rows + (deterministic ? 2 * B * NH * t * t : 4 * rows * HS) + kCudnnAttentionEngineWorkspaceBytes +
         grouped;
}
// Whether the CUDA trainer (exec/cuda/cuda_trainer.cu) offers the model's attention to cuDNN: 16-bit types, T a
// multiple of 128 (cuDNN 9.14's fused backward needs a padding mask otherwise), a head size multiple of 8 up to 256,
// not --deterministic (our kernels are bit-reproducible; cuDNN's deterministic backward would add B*NH*T^2 bf16 of
// workspace). The workspace is allocated whenever it is offered, whether or not cuDNN then plans it.
inline bool cudnn_attention_offered(bool sixteen_bit, std::int64_t seq_len, std::int64_t head_size,
                                    bool deterministic) {
  return sixteen_bit && seq_len % 128 == 0 && head_size % 8 == 0 && head_size <= 256 && !deterministic;
}
inline bool cudnn_attention_offered(const ExecConfig& c) {
  return !c.network && cudnn_attention_offered(c.precision != ExecPrecision::fp32, c.seq_len, c.shape.head_size,
                                               c.zero.deterministic);
}
inline std::int64_t cudnn_attention_workspace_bytes(const ExecConfig& c) {
  return cudnn_attention_offered(c) ? cudnn_attention_workspace_bytes(c.micro_batch, c.seq_len, c.shape.heads,
                                                                      c.shape.kv_heads, c.shape.head_size,
                                                                      c.zero.deterministic)
                                    : 0;
}
inline constexpr std::int64_t kNormPartials = 1024;  // blocks of the grad-norm reduction (fp32 each)
// Sums of squares the ZeRO engine keeps per bucket for the global norm (exec/zero/zero_engine.cpp), fp32 each.
inline constexpr std::int64_t kNormSlots = 1024;
// Column-sum reductions of bias and LayerNorm gradients (exec/cuda/cuda_common.cuh ColumnSums): rows per row
// block, and the scratch floats for `rows` rows of at most `width` columns: one row the blocks add into with
// atomics, or, deterministic, one row per row block, added in order.
inline constexpr std::int64_t kColumnSumRowsPerBlock = 256;
inline std::int64_t column_sum_scratch_floats(std::int64_t rows, std::int64_t width, bool deterministic) {
  return deterministic ? (rows + kColumnSumRowsPerBlock - 1) / kColumnSumRowsPerBlock * width : width;
}

// One cudaMalloc of the CUDA executor, tagged with its planner component.
struct DeviceAllocation {
  std::string component;
  std::int64_t bytes = 0;
  std::string what = {};  // the tensor, as the allocator names it in an out-of-memory error (network buffers)
};

struct ExpectedMemory {
  std::int64_t params = 0, grads = 0, master_params = 0, optimizer_states = 0, activations = 0, logits = 0,
               workspace = 0;
  std::int64_t total() const {
    return params + grads + master_params + optimizer_states + activations + logits + workspace;
  }
  std::vector<std::pair<std::string, std::int64_t>> components() const;
};

ExpectedMemory expected_device_memory(const ExecConfig& config);

// Every allocation the CUDA executor keeps for training at `world` ranks (rank 0's), in the order it makes them:
// the ZeRO engine's (exec/zero/zero_engine.cpp: parameters, gradients, fp32 master and AdamW moments unless
// offloaded, stage 2-3 gradient bucket buffers, stage 3's persistent tensors and arena), the engine device's
// gradient-norm buffers (exec/cuda/cuda_zero_device.cu) and the trainer's (exec/cuda/cuda_trainer.cu allocate).
// Summed per component they are expected_device_memory's figures at one rank, stage 0 (a CPU test holds them
// together; with LoRA expected_device_memory is that sum); the transient "transfer" buffers of the offload's
// initialization and of set_params / restore_state are freed before training and left out. With LoRA the frozen
// base's engine comes first, then the adapters', then the trainer's buffers (the header's notes above).
std::vector<DeviceAllocation> device_allocations(const ExecConfig& config, int world);

// The kept blocks' MLP tensors, one allocation laid out in the backward's order (exec/cuda/cuda_trainer.cu
// allocate): block L-1's first, block 0's last, each block's pre-activations (FC, or gate and up) followed by its
// activation outputs (none under selective recompute, which rebuilds them in the backward working set).
//
// Stages 2-3 may keep the reduced gradient partition in it (exec/zero/zero_engine.h GradientPartitionHome::trainer):
// the partition sits at the allocation's start, and its chunks run in the order the backward reduces the buckets
// (exec/zero/zero_partition.h: the top of the layout first), so each bucket's reduce-scatter, which waits for the
// backward of the lowest block the bucket reaches, writes its chunk below the end of that block's MLP tensors, over
// blocks the backward has finished with; nothing reads them before the next forward, and the optimizer has read the
// partition by then. The chunks reduced before any block's backward (the final norm's and an untied head's) take
// bytes ahead of the blocks: gradient_partition_beyond. FSDP2 gets the same from PyTorch's caching allocator, which
// hands its sharded gradients the blocks the backward frees (torch/distributed/fsdp/_fully_shard/
// _fsdp_param_group.py post_backward); DeepSpeed keeps a partition of its own (stage_1_and_2.py
// single_partition_of_fp32_groups, stage3.py grad_partitions_flat_buffer). It applies with one micro-step a step
// (the partition lives from the reduce-scatters to the update of one step), no full recompute (its one set of
// block buffers is rebuilt for every block), neither offload (the host holds the reduced gradients), no LoRA, no
// fp32 gradient accumulation, and where it saves bytes.
struct MlpSavedLayout {
  std::int64_t blocks = 0;              // kept blocks: L, or 1 under full recompute
  std::int64_t block_stride = 0;        // bytes per block: e*sb*FI, plus e*sb*F for the activation outputs
  std::int64_t activations_offset = 0;  // a block's activation outputs after its pre-activations (e*sb*FI)
  std::int64_t gradient_partition_beyond = 0;  // bytes ahead of the blocks (the partition's first chunks)
  bool holds_gradient_partition = false;       // the partition at offset 0
  // Where kept block k's pre-activations start.
  std::int64_t block_offset(std::int64_t k) const {
    return gradient_partition_beyond + (blocks - 1 - k) * block_stride;
  }
  std::int64_t bytes() const { return gradient_partition_beyond + blocks * block_stride; }
  // The allocation's name, as the trainer gives it and device_allocations lists it.
  const char* name() const {
    return holds_gradient_partition
               ? "MLP pre-activations and activation outputs (block by block), and the gradient partition over them"
               : "MLP pre-activations and activation outputs (block by block)";
  }
};
MlpSavedLayout mlp_saved_layout(const ExecConfig& config, int world);

// The CUDA network trainer's own device buffers (exec/cuda/cuda_network_trainer.cu allocate, in this order), from
// the network plan (exec/network_plan.h) at micro-batch B, e bytes per element. Sub-buffers start at multiples of
// kNetworkAlignment bytes inside their allocation.
//   activations  the network's input (NHWC, e*B*input); the saved buffers (e*B*elements each); the transient slots
//                and the gradient slots (e*B*slot elements each); per BatchNorm the micro-batch's mean and rstd
//                (fp32, 2C); per max pooling its argmax indices (int32, B*output)
//   logits       the last op's buffer (its gradient is written over it) e*B*classes, per-sample losses and
//                correct-prediction flags (4B each)
//   workspace    the BatchNorm running statistics (fp32 buffers, 2C per BatchNorm), the images' fp32 upload
//                (4*B*input), labels (4B) and the loss gradient's scale (4), a convolution weight and its gradient in channels-last order (e*largest
//                conv weight each), the BatchNorm reduction scratch (4 * the largest batchnorm_scratch_floats), the
//                bias gradients' column sums (4 * the largest bias_grad_scratch_floats, when an op has a bias), cuDNN's
//                workspace (kCudnnWorkspaceBytes) and cuBLASLt's (kCublasWorkspaceBytes)
inline constexpr std::int64_t kNetworkAlignment = 256;
inline constexpr const char* kActivationGradientsName = "activation gradients";  // the gradient slots' allocation
// Rows per row block of the BatchNorm reductions (exec/cuda/batchnorm.cu) and their scratch floats for M rows.
inline constexpr std::int64_t kBatchNormRows = 256;
inline std::int64_t batchnorm_scratch_floats(std::int64_t M, std::int64_t C) {
  return 2 * ((M + kBatchNormRows - 1) / kBatchNormRows) * C;
}
// Rows per row block of a bias gradient's column sums (exec/cuda/tensor_ops.cu bias_grad) and their scratch floats.
inline constexpr std::int64_t kBiasGradRows = 256;
inline std::int64_t bias_grad_scratch_floats(std::int64_t M, std::int64_t C) {
  return (M + kBiasGradRows - 1) / kBiasGradRows * C;
}
struct NetworkDeviceLayout {
  std::vector<DeviceAllocation> allocations;  // in allocation order, as device_allocations lists them
  // Which allocation holds what (-1: not made, e.g. no max pooling in the network).
  int input = -1, saved = -1, transient = -1, grads = -1, statistics = -1, indices = -1, logits = -1, losses = -1,
      correct = -1, running = -1, images = -1, labels = -1, dloss = -1, conv_weight = -1, conv_weight_grad = -1,
      batchnorm_partials = -1, bias_partials = -1, cudnn_workspace = -1, cublas_workspace = -1;
  // Byte offsets inside their allocation, -1 where none: per plan buffer (saved ones; the last op's buffer is the
  // logits allocation; transient ones lie in slot `slot` of the transient allocation), per op its BatchNorm
  // statistics, running statistics and max-pool indices.
  std::vector<std::int64_t> saved_offset;
  std::int64_t transient_slot_bytes = 0, grad_slot_bytes = 0;
  std::vector<std::int64_t> statistics_offset, running_offset, indices_offset;
  std::int64_t largest_conv_weight = 0;   // elements
  std::int64_t batchnorm_scratch = 0;     // floats
  std::int64_t bias_grad_floats = 0;      // floats (0: no op has a bias)
};
NetworkDeviceLayout network_device_layout(const ExecConfig& config, const NetworkPlan& plan);

// cudaMalloc maps device memory in pages of the allocation granularity (cuMemGetAllocationGranularity: 2 MiB on
// Hopper; CUDA Driver API, Virtual Memory Management), so an allocation of at least one page occupies its size
// rounded up to whole pages; smaller ones are packed together into shared pages. The device memory beyond the
// bytes asked for: each large allocation's round-up, and the small ones' pages less their bytes.
inline constexpr std::int64_t kDeviceAllocationGranularity = 2ll << 20;
std::int64_t allocation_granularity_bytes(const std::vector<DeviceAllocation>& allocations);
// The backward working set inside `activations` (dresidual, d(norm input), d(MLP/QKV), D).
std::int64_t backward_working_set_bytes(const ExecConfig& config);
// Columns of the widest bias / norm-weight gradient reduction (the column-sum scratch's width).
std::int64_t column_sum_width(const ModelShape& shape);

}  // namespace zeroplan::exec
