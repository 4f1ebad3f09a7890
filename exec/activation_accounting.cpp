#include "exec/activation_accounting.h"

#include "exec/param_layout.h"

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
  m.grads = e * P;
  m.master_params = c.precision == ExecPrecision::fp32 ? 0 : 4 * P;
  m.optimizer_states = 8 * P;
  if (c.zero.offload_optimizer) m.master_params = m.optimizer_states = 0;  // in host memory (ZeRO-Offload)
  const std::int64_t block = 16 * e * sbh + 16 * sb + 4 * a * sb;
  if (c.recompute == ExecRecompute::none) {
    m.activations = L * block + 2 * e * sbh + 8 * sb;
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

}  // namespace zeroplan::exec
