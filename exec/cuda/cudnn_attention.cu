#include "exec/cuda/cudnn_attention.cuh"

#include <array>
#include <cmath>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <utility>

#include <cudnn.h>

#include "exec/activation_accounting.h"
#include "exec/cuda/cuda_check.h"
#include "exec/cuda/cudnn_graph.cuh"

// The two operation graphs, as cudnn-frontend's composite SDPA nodes build them (include/cudnn_frontend/node/
// scaled_dot_product_flash_attention.h and softmax.h, v1.x) for a causal mask, a by-value attention scale, Stats
// wanted, no bias, dropout or padding. Every intermediate is a virtual tensor, fp32 unless said; the scalars are
// by-value fp32 [1,1,1,1] tensors; every tensor 16-byte aligned; matmuls, reductions and arithmetic compute in fp32.
// S is [B, NH, T, T] (strides NH*T*T, T*T, T, 1), row quantities [B, NH, T, 1].
//
// Forward (non-virtual: Q, KT, V, O, Stats, scale, -inf):
//    1 matmul      S = Q x KT                              (K's transposed view: the GQA broadcast is cuDNN's)
//    2 MUL         S1 = S * scale
//    3 GEN_INDEX   row = index of S1 along axis 2          (int32)
//    4 GEN_INDEX   col = index of S1 along axis 3          (int32)
//    5 CMP_GE      keep = row >= col                        (boolean)
//    6 BINARY_SELECT  S2 = keep ? S1 : -inf                 (-inf; the lowest float before cuDNN 9.10, as the
//                                                           frontend's get_negative_inf_value)
//    7 reduce MAX  M = max over the row of S2
//    8 SUB         Z = S2 - M
//    9 EXP         E = exp(Z)
//   10 reduce ADD  L = sum over the row of E
//   11 LOG         G = log(L)
//   12 ADD         Stats = M + G                            (the natural-log logsumexp: our lse)
//   13 DIV         P = E / L                                (P in the input type: the second matmul's A operand)
//   14 matmul      O = P x V
// Backward (non-virtual: Q, KT, VT, O, dO, Stats, dQ, dK, dV, scale, -inf, one, and the workspace's fp32 D and,
// without --deterministic, dQacc):
//    1 MUL         X = dO * O                               ([B, NH, T, HS])
//    2 reduce ADD  R = sum over the row of X
//    3 MUL         D = R * one                              (non-virtual fp32 [B, NH, T, 1] in the workspace;
//                                                           the frontend's dropout-scale slot, 1 without dropout)
//    4 matmul      S = Q x KT
//    5 MUL         S1 = S * scale
//    6 SUB         Z = S1 - Stats
//    7-10          causal mask of Z as forward 3-6: Z2      (the frontend masks after the subtraction here)
//   11 EXP         P = exp(Z2)                              (the probabilities, recomputed)
//   12 RESHAPE     PT = P viewed [B, NH, T, T] with strides (NH*T*T, T*T, 1, T), input type
//   13 matmul      dV = PT x dO                             (GQA: into a virtual [B, NH, T, HS] of the input type,
//   13'reduce ADD  dV = sum over each group's query heads    then reduced to [B, NKV, T, HS])
//   14 matmul      dP = dO x VT
//   15 SUB         Y = dP - D
//   16 MUL         Y1 = Y * P
//   17 MUL         dS = Y1 * scale
//   18 RESHAPE     dST = dS transposed as 12, input type
//   19 matmul      dK = dST x Q                             (GQA: as 13/13')
//   20 RESHAPE     K = KT viewed back as [B, NKV, T, HS]
//   21 matmul      dQacc = dS x K                           (non-virtual fp32 [B, NH, T, HS] in the workspace)
//   22 IDENTITY    dQ = dQacc
//   --deterministic: 21 writes dQ itself and 22 is left out (the frontend's "dP workspace" variant, which its
//   is_deterministic_algorithm selects on Hopper with cuDNN before 9.25).

namespace zeroplan::exec::cuda {

namespace {

using i64 = std::int64_t;
using Descriptor = CudnnDescriptor;
using Dims = std::array<i64, 4>;

constexpr i64 kByteAlignment = 16;
constexpr i64 kWorkspaceAlignment = 256;

// Unique ids of the non-virtual tensors (variant packs name them); virtual ones count up from kFirstVirtual.
enum Uid : i64 {
  kQ = 1, kKT, kV, kO, kStats, kDO, kDQ, kDK, kDV, kScale, kNegInf, kOne, kRowSum, kDQAccum, kFirstVirtual = 100
};

i64 align_up(i64 v, i64 a) { return (v + a - 1) / a * a; }

// The workspace: the backward's D (and dQacc) first, each 256-aligned, the engines' own workspace after them.
i64 scratch_bytes(const CudnnAttentionShape& s, bool deterministic) {
  const i64 rows = static_cast<i64>(s.B) * s.NH * s.T;
  return align_up(4 * rows, kWorkspaceAlignment) + (deterministic ? 0 : align_up(4 * rows * s.HS, kWorkspaceAlignment));
}

bool has_note(const std::vector<cudnnBackendNumericalNote_t>& notes, cudnnBackendNumericalNote_t n) {
  for (cudnnBackendNumericalNote_t x : notes)
    if (x == n) return true;
  return false;
}

}  // namespace

std::string CudnnAttentionShape::describe() const {
  return "B " + std::to_string(B) + ", T " + std::to_string(T) + ", heads " + std::to_string(NH) + "/" +
         std::to_string(NKV) + ", head size " + std::to_string(HS) + ", " + to_string(precision);
}

// One direction: the descriptors it keeps alive (tensors, operations), the graph, the chosen plan, the variant
// pack of the last pointers it ran on.
struct CudnnAttention::Graph {
  std::vector<std::unique_ptr<Descriptor>> keep;
  std::vector<cudnnBackendDescriptor_t> ops;
  std::unique_ptr<Descriptor> graph, config, plan, pack;
  std::vector<i64> uids;  // the variant pack's, in order: data pointers are given in this order
  std::vector<const void*> pointers;
  void* pack_workspace = nullptr;
  i64 engine = -1, workspace = 0;
  i64 next_virtual = kFirstVirtual;

  cudnnBackendDescriptor_t tensor(i64 uid, cudnnDataType_t dt, const Dims& dims, const Dims& strides,
                                  bool is_virtual = false, bool by_value = false) {
    auto t = std::make_unique<Descriptor>(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
    CUDNN_SET(t->get(), CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &dt);
    CUDNN_SET(t->get(), CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dims.data());
    CUDNN_SET(t->get(), CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, strides.data());
    CUDNN_SET(t->get(), CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid);
    CUDNN_SET(t->get(), CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &kByteAlignment);
    if (is_virtual) {
      const bool v = true;
      CUDNN_SET(t->get(), CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &v);
    }
    if (by_value) {
      const bool v = true;
      CUDNN_SET(t->get(), CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, 1, &v);
    }
    t->finalize();
    if (!is_virtual) uids.push_back(uid);
    keep.push_back(std::move(t));
    return keep.back()->get();
  }
  cudnnBackendDescriptor_t virt(cudnnDataType_t dt, const Dims& dims, const Dims& strides) {
    return tensor(next_virtual++, dt, dims, strides, /*is_virtual=*/true);
  }
  cudnnBackendDescriptor_t scalar(i64 uid) {
    return tensor(uid, CUDNN_DATA_FLOAT, {1, 1, 1, 1}, {1, 1, 1, 1}, false, /*by_value=*/true);
  }
  void add(std::unique_ptr<Descriptor> op) {
    op->finalize();
    ops.push_back(op->get());
    keep.push_back(std::move(op));
  }
  // y = mode(x[, b[, t]]); GEN_INDEX's axis; compute type fp32 unless given.
  void pointwise(cudnnPointwiseMode_t mode, cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t y,
                 cudnnBackendDescriptor_t b = nullptr, cudnnBackendDescriptor_t t = nullptr,
                 cudnnDataType_t compute = CUDNN_DATA_FLOAT, i64 axis = -1) {
    auto pw = std::make_unique<Descriptor>(CUDNN_BACKEND_POINTWISE_DESCRIPTOR);
    CUDNN_SET(pw->get(), CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode);
    CUDNN_SET(pw->get(), CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &compute);
    if (axis >= 0) CUDNN_SET(pw->get(), CUDNN_ATTR_POINTWISE_AXIS, CUDNN_TYPE_INT64, 1, &axis);
    pw->finalize();
    cudnnBackendDescriptor_t pwd = pw->get();
    keep.push_back(std::move(pw));
    auto op = std::make_unique<Descriptor>(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR);
    CUDNN_SET(op->get(), CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &pwd);
    CUDNN_SET(op->get(), CUDNN_ATTR_OPERATION_POINTWISE_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x);
    if (b) CUDNN_SET(op->get(), CUDNN_ATTR_OPERATION_POINTWISE_BDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &b);
    if (t) CUDNN_SET(op->get(), CUDNN_ATTR_OPERATION_POINTWISE_TDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &t);
    CUDNN_SET(op->get(), CUDNN_ATTR_OPERATION_POINTWISE_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y);
    add(std::move(op));
  }
  void reduction(cudnnReduceTensorOp_t mode, cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t y) {
    auto r = std::make_unique<Descriptor>(CUDNN_BACKEND_REDUCTION_DESCRIPTOR);
    const cudnnDataType_t compute = CUDNN_DATA_FLOAT;
    CUDNN_SET(r->get(), CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, 1, &mode);
    CUDNN_SET(r->get(), CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &compute);
    r->finalize();
    cudnnBackendDescriptor_t rd = r->get();
    keep.push_back(std::move(r));
    auto op = std::make_unique<Descriptor>(CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR);
    CUDNN_SET(op->get(), CUDNN_ATTR_OPERATION_REDUCTION_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x);
    CUDNN_SET(op->get(), CUDNN_ATTR_OPERATION_REDUCTION_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y);
    CUDNN_SET(op->get(), CUDNN_ATTR_OPERATION_REDUCTION_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &rd);
    add(std::move(op));
  }
  void matmul(cudnnBackendDescriptor_t a, cudnnBackendDescriptor_t b, cudnnBackendDescriptor_t c) {
    auto m = std::make_unique<Descriptor>(CUDNN_BACKEND_MATMUL_DESCRIPTOR);
    const cudnnDataType_t compute = CUDNN_DATA_FLOAT;
    CUDNN_SET(m->get(), CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &compute);
    m->finalize();
    cudnnBackendDescriptor_t md = m->get();
    keep.push_back(std::move(m));
    auto op = std::make_unique<Descriptor>(CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR);
    CUDNN_SET(op->get(), CUDNN_ATTR_OPERATION_MATMUL_ADESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &a);
    CUDNN_SET(op->get(), CUDNN_ATTR_OPERATION_MATMUL_BDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &b);
    CUDNN_SET(op->get(), CUDNN_ATTR_OPERATION_MATMUL_CDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &c);
    CUDNN_SET(op->get(), CUDNN_ATTR_OPERATION_MATMUL_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &md);
    add(std::move(op));
  }
  void reshape(cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t y) {
    auto op = std::make_unique<Descriptor>(CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR);
    CUDNN_SET(op->get(), CUDNN_ATTR_OPERATION_RESHAPE_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x);
    CUDNN_SET(op->get(), CUDNN_ATTR_OPERATION_RESHAPE_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y);
    add(std::move(op));
  }
};

struct CudnnAttention::Plan {
  CudnnAttentionShape shape;
  std::unique_ptr<Graph> forward, backward;
  std::string refused;  // empty: both directions planned
  // The by-value scalars (host values whose addresses the variant packs hold).
  float scale = 1.0f, neg_inf = std::numeric_limits<float>::lowest(), one = 1.0f;
};

namespace {

// The tensors both graphs share, and the causal-masked scaled scores S2 of Q x KT (forward 1-6, backward 4-9).
struct Common {
  i64 B, T, NH, NKV, HS, W;
  cudnnDataType_t io;
  Dims sdims, sstrides, rowdims, rowstrides;
  explicit Common(const CudnnAttentionShape& s, cudnnDataType_t io_type)
      : B(s.B), T(s.T), NH(s.NH), NKV(s.NKV), HS(s.HS), W(static_cast<i64>(s.NH + 2 * s.NKV) * s.HS), io(io_type) {
    sdims = {B, NH, T, T};
    sstrides = {NH * T * T, T * T, T, 1};
    rowdims = {B, NH, T, 1};
    rowstrides = {NH * T, T, 1, 1};
  }
  // [B, heads, T, HS] views of qkv / dqkv and of out / dout.
  Dims qkv_strides() const { return {T * W, HS, W, 1}; }
  Dims qkv_transposed_strides() const { return {T * W, HS, 1, W}; }
  Dims out_strides() const { return {T * NH * HS, HS, NH * HS, 1}; }

  // `minus` (the backward's Stats): subtracted before the mask, where the frontend puts it.
  cudnnBackendDescriptor_t masked_scores(CudnnAttention::Graph& g, cudnnBackendDescriptor_t q,
                                         cudnnBackendDescriptor_t kt, cudnnBackendDescriptor_t scale,
                                         cudnnBackendDescriptor_t neg_inf,
                                         cudnnBackendDescriptor_t minus = nullptr) const {
    auto s = g.virt(CUDNN_DATA_FLOAT, sdims, sstrides);
    g.matmul(q, kt, s);
    auto s1 = g.virt(CUDNN_DATA_FLOAT, sdims, sstrides);
    g.pointwise(CUDNN_POINTWISE_MUL, s, s1, scale);
    if (minus) {
      auto z = g.virt(CUDNN_DATA_FLOAT, sdims, sstrides);
      g.pointwise(CUDNN_POINTWISE_SUB, s1, z, minus);
      s1 = z;
    }
    auto row = g.virt(CUDNN_DATA_INT32, sdims, sstrides);
    g.pointwise(CUDNN_POINTWISE_GEN_INDEX, s1, row, nullptr, nullptr, CUDNN_DATA_INT32, 2);
    auto col = g.virt(CUDNN_DATA_INT32, sdims, sstrides);
    g.pointwise(CUDNN_POINTWISE_GEN_INDEX, s1, col, nullptr, nullptr, CUDNN_DATA_INT32, 3);
    auto keep = g.virt(CUDNN_DATA_BOOLEAN, sdims, sstrides);
    g.pointwise(CUDNN_POINTWISE_CMP_GE, row, keep, col, nullptr, CUDNN_DATA_BOOLEAN);
    auto s2 = g.virt(CUDNN_DATA_FLOAT, sdims, sstrides);
    g.pointwise(CUDNN_POINTWISE_BINARY_SELECT, s1, s2, neg_inf, keep);
    return s2;
  }
};

}  // namespace

CudnnAttention::CudnnAttention(cudaStream_t stream, bool deterministic)
    : stream_(stream), deterministic_(deterministic) {
  cudnnHandle_t h = nullptr;
  CUDNN_CHECK(cudnnCreate(&h));
  handle_ = h;
  const cudnnStatus_t st = cudnnSetStream(h, stream_);
  if (st != CUDNN_STATUS_SUCCESS) {
    cudnnDestroy(h);
    handle_ = nullptr;
    CUDNN_CHECK(st);
  }
}

CudnnAttention::~CudnnAttention() {
  plans_.clear();
  if (handle_) cudnnDestroy(static_cast<cudnnHandle_t>(handle_));
}

std::int64_t CudnnAttention::workspace_bytes(const CudnnAttentionShape& s, bool deterministic) {
  return cudnn_attention_workspace_bytes(s.B, s.T, s.NH, s.NKV, s.HS, deterministic);
}

void CudnnAttention::set_workspace(void* workspace, std::int64_t bytes) {
  if (reinterpret_cast<std::uintptr_t>(workspace) % kWorkspaceAlignment != 0)
    throw std::invalid_argument("cudnn attention: the workspace must be 256-byte aligned");
  workspace_ = workspace;
  workspace_bytes_ = bytes;
}

CudnnAttention::Plan* CudnnAttention::find(const CudnnAttentionShape& s) const {
  for (const auto& p : plans_)
    if (p->shape == s) return p.get();
  return nullptr;
}

namespace {

// The graph made an operation graph, and the first engine configuration of cuDNN's heuristics (mode A, then the
// fallback list) that finalizes, fits `engine_budget` and, when deterministic, has no NONDETERMINISTIC note.
// Returns an empty string or why none did.
std::string finalize_plan(CudnnAttention::Graph& g, cudnnHandle_t h, i64 engine_budget, bool deterministic) {
  g.graph = std::make_unique<Descriptor>(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
  CUDNN_SET(g.graph->get(), CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR,
            static_cast<i64>(g.ops.size()), g.ops.data());
  CUDNN_SET(g.graph->get(), CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &h);
  cudnnStatus_t st = cudnnBackendFinalize(g.graph->get());
  if (st != CUDNN_STATUS_SUCCESS)
    return std::string("the operation graph was refused (") + cudnnGetErrorString(st) + ")";
  std::string tried;
  int proposed = 0;
  for (cudnnBackendHeurMode_t mode : {CUDNN_HEUR_MODE_A, CUDNN_HEUR_MODE_FALLBACK}) {
    Descriptor heuristics(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
    cudnnBackendDescriptor_t gd = g.graph->get();
    CUDNN_SET(heuristics.get(), CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &gd);
    CUDNN_SET(heuristics.get(), CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode);
    st = cudnnBackendFinalize(heuristics.get());
    if (st != CUDNN_STATUS_SUCCESS) {
      tried += std::string(tried.empty() ? "" : "; ") + "heuristics " + (mode == CUDNN_HEUR_MODE_A ? "A" : "fallback") +
               ": " + cudnnGetErrorString(st);
      continue;
    }
    i64 count = 0;
    CUDNN_CHECK(cudnnBackendGetAttribute(heuristics.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                         CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &count, nullptr));
    std::vector<std::unique_ptr<Descriptor>> configs;
    std::vector<cudnnBackendDescriptor_t> raw;
    for (i64 i = 0; i < count; ++i) {
      configs.push_back(std::make_unique<Descriptor>(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR));
      raw.push_back(configs.back()->get());
    }
    if (count > 0)
      CUDNN_CHECK(cudnnBackendGetAttribute(heuristics.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                           CUDNN_TYPE_BACKEND_DESCRIPTOR, count, &count, raw.data()));
    proposed += static_cast<int>(count);
    for (i64 i = 0; i < count; ++i) {
      Descriptor engine(CUDNN_BACKEND_ENGINE_DESCRIPTOR);
      cudnnBackendDescriptor_t ed = engine.get();
      i64 got = 0, index = -1;
      CUDNN_CHECK(cudnnBackendGetAttribute(raw[i], CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
                                           &got, &ed));
      CUDNN_CHECK(cudnnBackendGetAttribute(ed, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &got, &index));
      const std::string name = "engine " + std::to_string(index);
      std::vector<cudnnBackendNumericalNote_t> notes(CUDNN_NUMERICAL_NOTE_TYPE_COUNT);
      CUDNN_CHECK(cudnnBackendGetAttribute(ed, CUDNN_ATTR_ENGINE_NUMERICAL_NOTE, CUDNN_TYPE_NUMERICAL_NOTE,
                                           CUDNN_NUMERICAL_NOTE_TYPE_COUNT, &got, notes.data()));
      notes.resize(static_cast<std::size_t>(got));
      if (deterministic && has_note(notes, CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC)) {
        tried += (tried.empty() ? "" : "; ") + name + ": nondeterministic";
        continue;
      }
      auto plan = std::make_unique<Descriptor>(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
      cudnnBackendDescriptor_t config = raw[i];
      CUDNN_SET(plan->get(), CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &h);
      CUDNN_SET(plan->get(), CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &config);
      st = cudnnBackendFinalize(plan->get());
      if (st != CUDNN_STATUS_SUCCESS) {
        tried += (tried.empty() ? "" : "; ") + name + ": " + cudnnGetErrorString(st);
        continue;
      }
      i64 workspace = 0;
      CUDNN_CHECK(cudnnBackendGetAttribute(plan->get(), CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64,
                                           1, &got, &workspace));
      if (workspace < 0 || workspace > engine_budget) {
        tried += (tried.empty() ? "" : "; ") + name + ": workspace " + std::to_string(workspace) + " B over " +
                 std::to_string(engine_budget);
        continue;
      }
      g.plan = std::move(plan);
      g.config = std::move(configs[static_cast<std::size_t>(i)]);
      g.engine = index;
      g.workspace = workspace;
      return "";
    }
  }
  return std::to_string(proposed) + " engine configurations proposed" + (tried.empty() ? "" : " (" + tried + ")");
}

}  // namespace

CudnnAttention::Plan& CudnnAttention::plan(const CudnnAttentionShape& s) {
  if (Plan* p = find(s)) return *p;
  auto p = std::make_unique<Plan>();
  p->shape = s;
  p->scale = 1.0f / std::sqrt(static_cast<float>(s.HS));
  // The masked scores' value: the frontend's choice for this backend (the lowest float before cuDNN 9.10)
  if (cudnnGetVersion() >= 91000) p->neg_inf = -std::numeric_limits<float>::infinity();
  Plan& out = *p;
  out.refused = "planning did not finish";  // cleared once both directions are planned
  plans_.push_back(std::move(p));
  if (s.B < 1 || s.T < 1 || s.NH < 1 || s.NKV < 1 || s.HS < 1 || s.NH % s.NKV != 0) {
    out.refused = "invalid shape (" + s.describe() + ")";
    return out;
  }
  if (s.precision == ExecPrecision::fp32) {
    out.refused = "fp32 (cuDNN's fused attention takes 16-bit types)";
    return out;
  }
  if (s.T % 128 != 0) {
    out.refused = "T " + std::to_string(s.T) + " is not a multiple of 128 (cuDNN 9.14's fused backward needs a "
                  "padding mask then)";
    return out;
  }
  if (s.HS % 8 != 0 || s.HS > 256) {
    out.refused = "head size " + std::to_string(s.HS) + " (a multiple of 8 up to 256)";
    return out;
  }
  const cudnnHandle_t h = static_cast<cudnnHandle_t>(handle_);
  const Common c(s, cudnn_data_type(s.precision));
  const bool gqa = s.NKV != s.NH;
  const i64 engine_budget = workspace_bytes(s, deterministic_) - scratch_bytes(s, deterministic_);
  try {
    {  // forward
      auto g = std::make_unique<Graph>();
      auto q = g->tensor(kQ, c.io, {c.B, c.NH, c.T, c.HS}, c.qkv_strides());
      auto kt = g->tensor(kKT, c.io, {c.B, c.NKV, c.HS, c.T}, c.qkv_transposed_strides());
      auto v = g->tensor(kV, c.io, {c.B, c.NKV, c.T, c.HS}, c.qkv_strides());
      auto o = g->tensor(kO, c.io, {c.B, c.NH, c.T, c.HS}, c.out_strides());
      auto stats = g->tensor(kStats, CUDNN_DATA_FLOAT, c.rowdims, c.rowstrides);
      auto scale = g->scalar(kScale);
      auto neg_inf = g->scalar(kNegInf);
      auto s2 = c.masked_scores(*g, q, kt, scale, neg_inf);
      auto m = g->virt(CUDNN_DATA_FLOAT, c.rowdims, c.rowstrides);
      g->reduction(CUDNN_REDUCE_TENSOR_MAX, s2, m);
      auto z = g->virt(CUDNN_DATA_FLOAT, c.sdims, c.sstrides);
      g->pointwise(CUDNN_POINTWISE_SUB, s2, z, m);
      auto e = g->virt(CUDNN_DATA_FLOAT, c.sdims, c.sstrides);
      g->pointwise(CUDNN_POINTWISE_EXP, z, e);
      auto l = g->virt(CUDNN_DATA_FLOAT, c.rowdims, c.rowstrides);
      g->reduction(CUDNN_REDUCE_TENSOR_ADD, e, l);
      auto lg = g->virt(CUDNN_DATA_FLOAT, c.rowdims, c.rowstrides);
      g->pointwise(CUDNN_POINTWISE_LOG, l, lg);
      g->pointwise(CUDNN_POINTWISE_ADD, m, stats, lg);
      auto prob = g->virt(c.io, c.sdims, c.sstrides);
      g->pointwise(CUDNN_POINTWISE_DIV, e, prob, l);
      g->matmul(prob, v, o);
      const std::string why = finalize_plan(*g, h, engine_budget, /*deterministic=*/false);
      if (!why.empty()) {
        out.refused = "forward: " + why;
        return out;
      }
      out.forward = std::move(g);
    }
    {  // backward
      auto g = std::make_unique<Graph>();
      auto q = g->tensor(kQ, c.io, {c.B, c.NH, c.T, c.HS}, c.qkv_strides());
      auto kt = g->tensor(kKT, c.io, {c.B, c.NKV, c.HS, c.T}, c.qkv_transposed_strides());
      auto vt = g->tensor(kV, c.io, {c.B, c.NKV, c.HS, c.T}, c.qkv_transposed_strides());
      auto o = g->tensor(kO, c.io, {c.B, c.NH, c.T, c.HS}, c.out_strides());
      auto dout = g->tensor(kDO, c.io, {c.B, c.NH, c.T, c.HS}, c.out_strides());
      auto stats = g->tensor(kStats, CUDNN_DATA_FLOAT, c.rowdims, c.rowstrides);
      auto dq = g->tensor(kDQ, c.io, {c.B, c.NH, c.T, c.HS}, c.qkv_strides());
      auto dk = g->tensor(kDK, c.io, {c.B, c.NKV, c.T, c.HS}, c.qkv_strides());
      auto dv = g->tensor(kDV, c.io, {c.B, c.NKV, c.T, c.HS}, c.qkv_strides());
      auto scale = g->scalar(kScale);
      auto neg_inf = g->scalar(kNegInf);
      auto one = g->scalar(kOne);
      auto rowsum = g->tensor(kRowSum, CUDNN_DATA_FLOAT, c.rowdims, c.rowstrides);
      // 1-3: D = rowsum(dO * O)
      auto x = g->virt(CUDNN_DATA_FLOAT, {c.B, c.NH, c.T, c.HS}, c.out_strides());
      g->pointwise(CUDNN_POINTWISE_MUL, dout, x, o);
      auto r = g->virt(CUDNN_DATA_FLOAT, c.rowdims, c.rowstrides);
      g->reduction(CUDNN_REDUCE_TENSOR_ADD, x, r);
      g->pointwise(CUDNN_POINTWISE_MUL, r, rowsum, one);
      // 4-11: P recomputed from Stats
      auto z = c.masked_scores(*g, q, kt, scale, neg_inf, stats);
      auto prob = g->virt(CUDNN_DATA_FLOAT, c.sdims, c.sstrides);
      g->pointwise(CUDNN_POINTWISE_EXP, z, prob);
      const Dims transposed = {c.NH * c.T * c.T, c.T * c.T, 1, c.T};
      const Dims full = {c.B, c.NH, c.T, c.HS}, full_strides = {c.NH * c.T * c.HS, c.T * c.HS, c.HS, 1};
      // 12-13: dV = P^T dO (GQA: per query head, then summed over the group)
      auto pt = g->virt(c.io, c.sdims, transposed);
      g->reshape(prob, pt);
      if (gqa) {
        auto dv_full = g->virt(c.io, full, full_strides);
        g->matmul(pt, dout, dv_full);
        g->reduction(CUDNN_REDUCE_TENSOR_ADD, dv_full, dv);
      } else {
        g->matmul(pt, dout, dv);
      }
      // 14-17: dS = P * (dO V^T - D) * scale
      auto dp = g->virt(CUDNN_DATA_FLOAT, c.sdims, c.sstrides);
      g->matmul(dout, vt, dp);
      auto y = g->virt(CUDNN_DATA_FLOAT, c.sdims, c.sstrides);
      g->pointwise(CUDNN_POINTWISE_SUB, dp, y, rowsum);
      auto y1 = g->virt(CUDNN_DATA_FLOAT, c.sdims, c.sstrides);
      g->pointwise(CUDNN_POINTWISE_MUL, y, y1, prob);
      auto ds = g->virt(CUDNN_DATA_FLOAT, c.sdims, c.sstrides);
      g->pointwise(CUDNN_POINTWISE_MUL, y1, ds, scale);
      // 18-19: dK = dS^T Q
      auto dst = g->virt(c.io, c.sdims, transposed);
      g->reshape(ds, dst);
      if (gqa) {
        auto dk_full = g->virt(c.io, full, full_strides);
        g->matmul(dst, q, dk_full);
        g->reduction(CUDNN_REDUCE_TENSOR_ADD, dk_full, dk);
      } else {
        g->matmul(dst, q, dk);
      }
      // 20-22: dQ = dS K
      auto k = g->virt(c.io, {c.B, c.NKV, c.T, c.HS}, c.qkv_strides());
      g->reshape(kt, k);
      if (deterministic_) {
        g->matmul(ds, k, dq);
      } else {
        auto acc = g->tensor(kDQAccum, CUDNN_DATA_FLOAT, full, full_strides);
        g->matmul(ds, k, acc);
        g->pointwise(CUDNN_POINTWISE_IDENTITY, acc, dq);
      }
      const std::string why = finalize_plan(*g, h, engine_budget, deterministic_);
      if (!why.empty()) {
        out.refused = std::string(deterministic_ ? "deterministic " : "") + "backward: " + why;
        out.forward.reset();
        return out;
      }
      out.backward = std::move(g);
    }
    out.refused.clear();
  } catch (const CudaError& e) {  // a descriptor cuDNN would not take: this shape is not for it
    out.refused = e.what();
    out.forward.reset();
    out.backward.reset();
  }
  return out;
}

bool CudnnAttention::supported(const CudnnAttentionShape& s, std::string* why) {
  const Plan& p = plan(s);
  if (why) *why = p.refused;
  return p.refused.empty();
}

void CudnnAttention::execute(Graph& g, const std::vector<const void*>& pointers, void* workspace) {
  if (!g.pack || g.pointers != pointers || g.pack_workspace != workspace) {
    auto pack = std::make_unique<Descriptor>(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
    std::vector<void*> raw;
    for (const void* ptr : pointers) raw.push_back(const_cast<void*>(ptr));
    CUDNN_SET(pack->get(), CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, static_cast<i64>(g.uids.size()),
              g.uids.data());
    CUDNN_SET(pack->get(), CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, static_cast<i64>(raw.size()),
              raw.data());
    CUDNN_SET(pack->get(), CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &workspace);
    pack->finalize();
    g.pack = std::move(pack);
    g.pointers = pointers;
    g.pack_workspace = workspace;
  }
  CUDNN_CHECK(cudnnBackendExecute(static_cast<cudnnHandle_t>(handle_), g.plan->get(), g.pack->get()));
}

namespace {

// The device pointer of a uid's tensor: each graph lists its uids in the order it declared them.
struct Pointers {
  std::vector<const void*> at;
  Pointers(const std::vector<i64>& uids, const std::vector<std::pair<i64, const void*>>& given) {
    for (i64 uid : uids) {
      const void* p = nullptr;
      for (const auto& [u, ptr] : given)
        if (u == uid) p = ptr;
      if (!p) throw std::logic_error("cudnn attention: no pointer for tensor " + std::to_string(uid));
      at.push_back(p);
    }
  }
};

}  // namespace

void CudnnAttention::forward(const CudnnAttentionShape& s, void* out, float* lse, const void* qkv) {
  Plan& p = plan(s);
  if (!p.refused.empty()) throw std::invalid_argument("cudnn attention: " + s.describe() + ": " + p.refused);
  if (!workspace_ || workspace_bytes_ < workspace_bytes(s, deterministic_))
    throw std::invalid_argument("cudnn attention: no workspace of " + std::to_string(workspace_bytes(s, deterministic_)) +
                                " bytes given (set_workspace)");
  const std::size_t e = 2;  // bytes per element (16-bit types)
  const char* base = static_cast<const char*>(qkv);
  const Pointers ptrs(p.forward->uids, {{kQ, base},
                                        {kKT, base + e * s.NH * s.HS},
                                        {kV, base + e * (s.NH + s.NKV) * s.HS},
                                        {kO, out},
                                        {kStats, lse},
                                        {kScale, &p.scale},
                                        {kNegInf, &p.neg_inf}});
  // The engine's workspace lies after the backward's buffers (forward and backward run in turn on one stream).
  execute(*p.forward, ptrs.at, static_cast<char*>(workspace_) + scratch_bytes(s, deterministic_));
}

void CudnnAttention::backward(const CudnnAttentionShape& s, void* dqkv, const void* dout, const void* qkv,
                              const void* out, const float* lse) {
  Plan& p = plan(s);
  if (!p.refused.empty()) throw std::invalid_argument("cudnn attention: " + s.describe() + ": " + p.refused);
  if (!workspace_ || workspace_bytes_ < workspace_bytes(s, deterministic_))
    throw std::invalid_argument("cudnn attention: no workspace of " + std::to_string(workspace_bytes(s, deterministic_)) +
                                " bytes given (set_workspace)");
  const std::size_t e = 2;
  const char* base = static_cast<const char*>(qkv);
  char* dbase = static_cast<char*>(dqkv);
  const i64 rows = static_cast<i64>(s.B) * s.NH * s.T;
  char* ws = static_cast<char*>(workspace_);
  const void* rowsum = ws;
  const void* accum = deterministic_ ? nullptr : ws + align_up(4 * rows, kWorkspaceAlignment);
  std::vector<std::pair<i64, const void*>> given = {{kQ, base},
                                                    {kKT, base + e * s.NH * s.HS},
                                                    {kV, base + e * (s.NH + s.NKV) * s.HS},
                                                    {kO, out},
                                                    {kDO, dout},
                                                    {kStats, lse},
                                                    {kDQ, dbase},
                                                    {kDK, dbase + e * s.NH * s.HS},
                                                    {kDV, dbase + e * (s.NH + s.NKV) * s.HS},
                                                    {kScale, &p.scale},
                                                    {kNegInf, &p.neg_inf},
                                                    {kOne, &p.one},
                                                    {kRowSum, rowsum}};
  if (accum) given.push_back({kDQAccum, accum});
  const Pointers ptrs(p.backward->uids, given);
  execute(*p.backward, ptrs.at, ws + scratch_bytes(s, deterministic_));
}

CudnnAttention::PlanInfo CudnnAttention::plan_info(const CudnnAttentionShape& s) const {
  const Plan* p = find(s);
  if (!p || !p->refused.empty())
    throw std::invalid_argument("cudnn attention: " + s.describe() + " is not planned" +
                                (p ? ": " + p->refused : std::string()));
  PlanInfo info;
  info.forward_plan = p->forward->plan.get();
  info.backward_plan = p->backward->plan.get();
  info.forward_engine = p->forward->engine;
  info.backward_engine = p->backward->engine;
  info.forward_workspace = p->forward->workspace;
  info.backward_workspace = p->backward->workspace;
  return info;
}

}  // namespace zeroplan::exec::cuda
