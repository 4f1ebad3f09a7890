#include "exec/activation_accounting.h"

#include "exec/param_layout.h"
#include "exec/zero/zero_buffer_layout.h"
#include "exec/zero/zero_partition.h"

namespace zeroplan::exec {

std::vector<std::pair<std::string, std::int64_t>> ExpectedMemory::components() const {
  return {{"params", params},     {"grads", grads},   {"master_params", master_params},
          {"optimizer_states", optimizer_states}, {"activations", activations}, {"logits", logits},
          {"workspace", workspace}};
}

std::int64_t backward_working_set_bytes(const ExecConfig& c) {
  const std::int64_t e = element_bytes(c.precision);
  const std::int64_t sbh = c.micro_batch * c.seq_len * c.shape.hidden, sb = c.micro_batch * c.seq_len;
  return 6 * e * sbh + 4 * c.shape.heads * sb;
}

ExpectedMemory expected_device_memory(const ExecConfig& c) {
  const ParamLayout layout(c.shape);
  const std::int64_t P = layout.total();
  const std::int64_t e = element_bytes(c.precision);
  const std::int64_t B = c.micro_batch, T = c.seq_len, C = c.shape.hidden, L = c.shape.layers, a = c.shape.heads;
  const std::int64_t sbh = B * T * C, sb = B * T;
  ExpectedMemory m;
  m.params = e * P;
  // fp32 gradient accumulation: fp32 gradients beside the micro-step gradients backward writes (zero_buffer_layout.h)
  m.grads = c.zero.fp32_grad_accumulation ? (4 + e) * P : e * P;
  m.master_params = c.precision == ExecPrecision::fp32 ? 0 : 4 * P;
  m.optimizer_states = 8 * P;
  if (c.zero.offload_optimizer) m.master_params = m.optimizer_states = 0;  // in host memory (ZeRO-Offload)
  const std::int64_t block = 16 * e * sbh + 16 * sb + 4 * a * sb;
  if (c.recompute == ExecRecompute::none) {
    m.activations = L * block + 2 * e * sbh + 8 * sb;
  } else if (c.recompute == ExecRecompute::selective) {
    m.activations = L * (block - 6 * e * sbh) + 2 * e * sbh + 8 * sb;
  } else {
    m.activations = (L + 1) * e * sbh + (block - e * sbh) + e * sbh + 8 * sb;
  }
  m.activations += backward_working_set_bytes(c);
  m.logits = e * sb * c.shape.padded_vocab + 4 * sb;
  const bool det = c.zero.deterministic;
  m.workspace = 4 * (column_sum_scratch_floats(sb, 4 * C, det) + 1) + (det ? 4 * (3 * sb + 1) : 0) +
                4 * (kNormPartials + 1) + 4 * kNormSlots + 8 * sb + kCublasWorkspaceBytes;
  return m;
}

std::vector<DeviceAllocation> device_allocations(const ExecConfig& c, int world) {
  const ParamLayout layout(c.shape, zero_alignment(world));
  const ZeroPartition partition(layout, world, 0, partition_rules(c.zero));
  const ZeroBufferLayout buffers = zero_buffer_layout(layout, partition, c.zero, c.grad_accum);
  const std::int64_t e = element_bytes(c.precision), n = layout.total(), part = partition.partition_elements();
  const int stage = c.zero.stage;
  const std::int64_t states = stage == 0 ? n : part;
  std::vector<DeviceAllocation> a;
  // exec/zero/zero_engine.cpp (constructor, setup_stage3); CUDA kernels overwrite, so no micro-step gradients.
  // offload_param (stage 3): the partition in host memory, staging buffers on the device instead.
  if (!c.zero.offload_param) a.push_back({"params", e * (stage == 3 ? part : n)});
  const std::int64_t grad_bytes = c.zero.fp32_grad_accumulation ? 4 : e;
  a.push_back({"grads", grad_bytes * (stage >= 2 ? part : n)});
  if (!c.zero.offload_optimizer) {
    if (c.precision != ExecPrecision::fp32) a.push_back({"master_params", 4 * states});
    a.push_back({"optimizer_states", 4 * states});
    a.push_back({"optimizer_states", 4 * states});
  }
  if (buffers.micro_step_gradients > 0) a.push_back({"grads", e * buffers.micro_step_gradients});
  for (std::int64_t elements : buffers.slot_elements) a.push_back({"gradient_buckets", e * elements});
  if (buffers.accumulation_scratch > 0)
    a.push_back({"gradient_buckets", (c.zero.fp32_communication ? 4 : e) * buffers.accumulation_scratch});
  if (buffers.communication_copy > 0) a.push_back({"gradient_buckets", 4 * buffers.communication_copy});
  if (stage == 3 && buffers.persistent_elements > 0) a.push_back({"gathered_params", e * buffers.persistent_elements});
  if (stage == 3 && buffers.arena_elements > 0) a.push_back({"gathered_params", e * buffers.arena_elements});
  for (int i = 0; i < buffers.param_staging_buffers; ++i)
    a.push_back({"offload_buffers", e * buffers.param_staging_elements});
  // exec/cuda/cuda_zero_device.cu (constructor): the gradient-norm slots and partials.
  a.push_back({"workspace", 4 * kNormSlots});
  a.push_back({"workspace", 4 * (kNormPartials + 1)});
  // exec/cuda/cuda_trainer.cu allocate(), in its order.
  const std::int64_t B = c.micro_batch, T = c.seq_len, C = c.shape.hidden, L = c.shape.layers, H = c.shape.heads;
  const std::int64_t bt = B * T, nb = c.recompute == ExecRecompute::full ? 1 : L;
  a.push_back({"activations", e * (L + 1) * bt * C});  // block inputs (residual stream)
  // LN1, QKV, attention, LN2 input, LN2, FC, GELU; selective keeps no LN1, LN2 or GELU outputs
  const bool selective = c.recompute == ExecRecompute::selective;
  for (auto [width, recomputed] : {std::pair{C, true}, {3 * C, false}, {C, false}, {C, false}, {C, true},
                                   {4 * C, false}, {4 * C, true}})
    if (!(selective && recomputed)) a.push_back({"activations", e * nb * bt * width});
  a.push_back({"activations", 4 * nb * 4 * bt});  // LayerNorm mean/rstd
  a.push_back({"activations", 4 * nb * bt * H});  // attention logsumexp
  a.push_back({"activations", e * bt * C});       // final LN output
  a.push_back({"activations", 4 * 2 * bt});       // final LN mean/rstd
  a.push_back({"logits", e * bt * c.shape.padded_vocab});
  a.push_back({"logits", 4 * bt});
  for (std::int64_t width : {C, C, 4 * C}) a.push_back({"activations", e * bt * width});  // backward working set
  a.push_back({"activations", 4 * bt * H});                                               // rowsum(dO*O)
  const bool det = c.zero.deterministic;
  a.push_back({"workspace", 4 * (column_sum_scratch_floats(bt, 4 * C, det) + 1)});
  a.push_back({"workspace", 4 * 2 * bt});
  if (det) a.push_back({"workspace", 4 * (3 * bt + 1)});
  a.push_back({"workspace", kCublasWorkspaceBytes});
  return a;
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
