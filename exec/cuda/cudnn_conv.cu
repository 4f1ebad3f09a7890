#include "exec/cuda/cudnn_conv.cuh"

#include <stdexcept>
#include <utility>

#include <cudnn.h>

#include "exec/cuda/cuda_check.h"
#include "exec/cuda/cudnn_graph.cuh"

namespace zeroplan::exec::cuda {

namespace {

std::string describe(const ConvShape& s) {
  return std::to_string(s.N) + "x" + std::to_string(s.C) + "x" + std::to_string(s.H) + "x" + std::to_string(s.W) +
         " -> " + std::to_string(s.K) + " k" + std::to_string(s.R) + " s" + std::to_string(s.stride) + " p" +
         std::to_string(s.padding) + (s.groups > 1 ? " g" + std::to_string(s.groups) : "");
}

void check_dimension(i64 v, const char* what, i64 least = 1) {
  if (v < least || v > (1ll << 31) - 1)
    throw std::invalid_argument(std::string("cudnn: ") + what + " " + std::to_string(v) + " outside [" +
                                std::to_string(least) + ", 2^31)");
}

// The unique ids of a convolution's three tensors in its operation graphs and variant packs.
constexpr std::int64_t kX = 1, kW = 2, kY = 3;
// Every tensor is declared 16-byte aligned, which the tensor-core kernels need: the trainer's buffers start at
// multiples of 256 bytes, a 1x1 filter read in place at a multiple of kNetworkTensorAlignment elements.
constexpr std::int64_t kByteAlignment = 16;

using Descriptor = CudnnDescriptor;

// An NCHW-indexed tensor of dims (n, c, h, w) stored channels-last (NHWC strides); filters are (K, C/groups, R, S)
// stored KRSC, the same strides.
std::unique_ptr<Descriptor> tensor(std::int64_t uid, cudnnDataType_t dt, i64 n, i64 c, i64 h, i64 w) {
  auto t = std::make_unique<Descriptor>(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
  const std::int64_t dims[4] = {n, c, h, w};
  const std::int64_t strides[4] = {h * w * c, 1, w * c, c};
  CUDNN_SET(t->get(), CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &dt);
  CUDNN_SET(t->get(), CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dims);
  CUDNN_SET(t->get(), CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, strides);
  CUDNN_SET(t->get(), CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid);
  CUDNN_SET(t->get(), CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &kByteAlignment);
  t->finalize();
  return t;
}

// PyTorch's Conv2d is a cross-correlation; its arithmetic in fp32 for every data type.
std::unique_ptr<Descriptor> convolution(const ConvShape& s) {
  auto c = std::make_unique<Descriptor>(CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR);
  const cudnnDataType_t compute = CUDNN_DATA_FLOAT;
  const cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION;
  const std::int64_t spatial = 2, padding[2] = {s.padding, s.padding}, stride[2] = {s.stride, s.stride},
                     dilation[2] = {s.dilation, s.dilation};
  CUDNN_SET(c->get(), CUDNN_ATTR_CONVOLUTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &compute);
  CUDNN_SET(c->get(), CUDNN_ATTR_CONVOLUTION_CONV_MODE, CUDNN_TYPE_CONVOLUTION_MODE, 1, &mode);
  CUDNN_SET(c->get(), CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, CUDNN_TYPE_INT64, 1, &spatial);
  CUDNN_SET(c->get(), CUDNN_ATTR_CONVOLUTION_DILATIONS, CUDNN_TYPE_INT64, 2, dilation);
  CUDNN_SET(c->get(), CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, CUDNN_TYPE_INT64, 2, stride);
  CUDNN_SET(c->get(), CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, CUDNN_TYPE_INT64, 2, padding);
  CUDNN_SET(c->get(), CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, CUDNN_TYPE_INT64, 2, padding);
  c->finalize();
  return c;
}

bool has_note(const std::vector<cudnnBackendNumericalNote_t>& notes, cudnnBackendNumericalNote_t n) {
  for (cudnnBackendNumericalNote_t x : notes)
    if (x == n) return true;
  return false;
}

}  // namespace

// One direction of one geometry with a fixed beta: its operation graph and the execution plan kept, plus the variant
// pack of the last buffers it ran on (rebuilt when they change: at stages 0-2 the buffers are the same every step).
struct CudnnConvolutions::Op {
  std::unique_ptr<Descriptor> operation, graph, config, plan;
  std::int64_t engine = -1;  // cuDNN's global engine index, for the record
  float ms = 0;              // measured (-1: the heuristic's choice, not timed)
  std::unique_ptr<Descriptor> pack;
  const void* pointers[3] = {nullptr, nullptr, nullptr};
};

struct CudnnConvolutions::Plan {
  ConvShape shape;
  std::unique_ptr<Descriptor> x, w, y, conv;
  // forward; input gradient written / added; filter gradient written / added
  std::unique_ptr<Op> forward, data[2], filter[2];
};

CudnnConvolutions::CudnnConvolutions(ExecPrecision precision, cudaStream_t stream, void* workspace,
                                     std::size_t workspace_bytes, bool deterministic)
    : precision_(precision), stream_(stream), workspace_(workspace), workspace_bytes_(workspace_bytes),
      deterministic_(deterministic) {
  cudnnHandle_t h = nullptr;
  CUDNN_CHECK(cudnnCreate(&h));
  handle_ = h;
  try {
    CUDNN_CHECK(cudnnSetStream(h, stream_));
    CUDA_CHECK(cudaEventCreate(&timing_start_));
    CUDA_CHECK(cudaEventCreate(&timing_end_));
  } catch (...) {
    release();
    throw;
  }
}

CudnnConvolutions::~CudnnConvolutions() { release(); }

void CudnnConvolutions::release() noexcept {
  plans_.clear();
  if (timing_end_) cudaEventDestroy(timing_end_);
  if (timing_start_) cudaEventDestroy(timing_start_);
  timing_start_ = timing_end_ = nullptr;
  if (handle_) cudnnDestroy(static_cast<cudnnHandle_t>(handle_));
  handle_ = nullptr;
}

// Runs `op` on the stream with the given tensors (x, w, y by unique id: for the backward directions dx, dw and dy are
// the x, w and y of the geometry).
int CudnnConvolutions::execute(Op& op, const void* x, const void* w, const void* y) {
  if (!op.pack || op.pointers[0] != x || op.pointers[1] != w || op.pointers[2] != y) {
    auto pack = std::make_unique<Descriptor>(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
    const std::int64_t uids[3] = {kX, kW, kY};
    void* pointers[3] = {const_cast<void*>(x), const_cast<void*>(w), const_cast<void*>(y)};
    void* workspace = workspace_;
    CUDNN_SET(pack->get(), CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, 3, uids);
    CUDNN_SET(pack->get(), CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, 3, pointers);
    CUDNN_SET(pack->get(), CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &workspace);
    pack->finalize();
    op.pack = std::move(pack);
    op.pointers[0] = x;
    op.pointers[1] = w;
    op.pointers[2] = y;
  }
  return static_cast<int>(cudnnBackendExecute(static_cast<cudnnHandle_t>(handle_), op.plan->get(), op.pack->get()));
}

// cuDNN's graph API, as PyTorch's cudnn.benchmark uses it (cudnn-frontend): the convolution as a one-operation graph,
// the engine configurations of heuristic mode A, each made an execution plan; those that cuDNN can build, that fit
// the fixed workspace and whose numerical notes the run allows are timed on the run's own buffers (one launch, which
// loads the kernel's module, then the mean of kTimedRuns) and the fastest kept. Under --deterministic the first such
// in the heuristic's order, untimed (a choice by timing can differ between two runs, and with it the result).
// Not the legacy API (cudnnFind*Ex / cudnnGet*_v7): on the H200 with cuDNN 9.14 its algorithms reach only cuDNN's
// legacy kernels for channels-last 16-bit data (72 us to 1.1 ms for ResNet-101's 1x1 and 3x3 geometries at batch
// 128, where PyTorch's sm90 implicit-GEMM kernels take 5 to 27 us), and cudnnFind*Ex's single timing includes lazy
// module loading.
std::unique_ptr<CudnnConvolutions::Op> CudnnConvolutions::build(const Plan& p, Direction direction, float beta,
                                                                const std::string& what, void* x, void* w, void* y) {
  const cudnnHandle_t h = static_cast<cudnnHandle_t>(handle_);
  auto op = std::make_unique<Op>();
  const float alpha = 1.0f;
  cudnnBackendDescriptor_t xd = p.x->get(), wd = p.w->get(), yd = p.y->get(), cd = p.conv->get();
  switch (direction) {
    case Direction::forward:
      op->operation = std::make_unique<Descriptor>(CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR);
      CUDNN_SET(op->operation->get(), CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &xd);
      CUDNN_SET(op->operation->get(), CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &wd);
      CUDNN_SET(op->operation->get(), CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &yd);
      CUDNN_SET(op->operation->get(), CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                1, &cd);
      CUDNN_SET(op->operation->get(), CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA, CUDNN_TYPE_FLOAT, 1, &alpha);
      CUDNN_SET(op->operation->get(), CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA, CUDNN_TYPE_FLOAT, 1, &beta);
      break;
    case Direction::data:
      op->operation = std::make_unique<Descriptor>(CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR);
      CUDNN_SET(op->operation->get(), CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DX, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &xd);
      CUDNN_SET(op->operation->get(), CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_W, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &wd);
      CUDNN_SET(op->operation->get(), CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DY, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &yd);
      CUDNN_SET(op->operation->get(), CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_CONV_DESC,
                CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &cd);
      CUDNN_SET(op->operation->get(), CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_ALPHA, CUDNN_TYPE_FLOAT, 1, &alpha);
      CUDNN_SET(op->operation->get(), CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_BETA, CUDNN_TYPE_FLOAT, 1, &beta);
      break;
    case Direction::filter:
      op->operation = std::make_unique<Descriptor>(CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR);
      CUDNN_SET(op->operation->get(), CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_X, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
                &xd);
      CUDNN_SET(op->operation->get(), CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DW, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
                &wd);
      CUDNN_SET(op->operation->get(), CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DY, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
                &yd);
      CUDNN_SET(op->operation->get(), CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_CONV_DESC,
                CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &cd);
      CUDNN_SET(op->operation->get(), CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_ALPHA, CUDNN_TYPE_FLOAT, 1, &alpha);
      CUDNN_SET(op->operation->get(), CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_BETA, CUDNN_TYPE_FLOAT, 1, &beta);
      break;
  }
  op->operation->finalize();
  op->graph = std::make_unique<Descriptor>(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
  cudnnBackendDescriptor_t od = op->operation->get();
  CUDNN_SET(op->graph->get(), CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &od);
  CUDNN_SET(op->graph->get(), CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &h);
  op->graph->finalize();

  Descriptor heuristics(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
  cudnnBackendDescriptor_t gd = op->graph->get();
  const cudnnBackendHeurMode_t mode = CUDNN_HEUR_MODE_A;
  CUDNN_SET(heuristics.get(), CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &gd);
  CUDNN_SET(heuristics.get(), CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode);
  heuristics.finalize();
  std::int64_t count = 0;
  CUDNN_CHECK(cudnnBackendGetAttribute(heuristics.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                                       0, &count, nullptr));
  std::vector<std::unique_ptr<Descriptor>> configs;
  std::vector<cudnnBackendDescriptor_t> raw;
  for (std::int64_t i = 0; i < count; ++i) {
    configs.push_back(std::make_unique<Descriptor>(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR));
    raw.push_back(configs.back()->get());
  }
  if (count > 0)
    CUDNN_CHECK(cudnnBackendGetAttribute(heuristics.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                         CUDNN_TYPE_BACKEND_DESCRIPTOR, count, &count, raw.data()));

  const bool fp32 = precision_ == ExecPrecision::fp32;
  constexpr int kTimedRuns = 3, kMostTimed = 24;
  int timed = 0;
  for (std::int64_t i = 0; i < count && timed < kMostTimed; ++i) {
    Descriptor engine(CUDNN_BACKEND_ENGINE_DESCRIPTOR);
    cudnnBackendDescriptor_t ed = engine.get();
    std::int64_t got = 0;
    CUDNN_CHECK(cudnnBackendGetAttribute(raw[i], CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &got,
                                         &ed));
    std::vector<cudnnBackendNumericalNote_t> notes(CUDNN_NUMERICAL_NOTE_TYPE_COUNT);
    CUDNN_CHECK(cudnnBackendGetAttribute(ed, CUDNN_ATTR_ENGINE_NUMERICAL_NOTE, CUDNN_TYPE_NUMERICAL_NOTE,
                                         CUDNN_NUMERICAL_NOTE_TYPE_COUNT, &got, notes.data()));
    notes.resize(static_cast<std::size_t>(got));
    std::vector<cudnnBackendBehaviorNote_t> behaviour(CUDNN_BEHAVIOR_NOTE_TYPE_COUNT);
    CUDNN_CHECK(cudnnBackendGetAttribute(ed, CUDNN_ATTR_ENGINE_BEHAVIOR_NOTE, CUDNN_TYPE_BEHAVIOR_NOTE,
                                         CUDNN_BEHAVIOR_NOTE_TYPE_COUNT, &got, behaviour.data()));
    behaviour.resize(static_cast<std::size_t>(got));
    // Left out: engines that compile kernels at run time (NVRTC; seconds per geometry at start-up), nondeterministic
    // ones under --deterministic, and for fp32 data any that computes in reduced precision (TF32 tensor cores, inputs
    // converted down: on the H200 TF32 put the fp32 ResNet-101 step 9e-5 from torchvision's loss) or by a transform
    // (FFT, Winograd), so that fp32 stays the direct sum. So restricted, the fp32 step's loss was 2.2e-6 from the
    // fp64 step's, torchvision's own fp32 3.7e-5 (batch 8, bench/resnet/device_resnet.sh 'correct').
    bool allowed = true;
    for (cudnnBackendBehaviorNote_t b : behaviour) allowed = allowed && b != CUDNN_BEHAVIOR_NOTE_RUNTIME_COMPILATION;
    if (deterministic_ && has_note(notes, CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC)) allowed = false;
    if (fp32)
      for (cudnnBackendNumericalNote_t n : {CUDNN_NUMERICAL_NOTE_TENSOR_CORE, CUDNN_NUMERICAL_NOTE_DOWN_CONVERT_INPUTS,
                                            CUDNN_NUMERICAL_NOTE_REDUCED_PRECISION_REDUCTION, CUDNN_NUMERICAL_NOTE_FFT,
                                            CUDNN_NUMERICAL_NOTE_WINOGRAD, CUDNN_NUMERICAL_NOTE_WINOGRAD_TILE_4x4,
                                            CUDNN_NUMERICAL_NOTE_WINOGRAD_TILE_6x6,
                                            CUDNN_NUMERICAL_NOTE_WINOGRAD_TILE_13x13})
        allowed = allowed && !has_note(notes, n);
    if (!allowed) continue;
    auto plan = std::make_unique<Descriptor>(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
    cudnnBackendDescriptor_t config = raw[i];
    CUDNN_SET(plan->get(), CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &h);
    CUDNN_SET(plan->get(), CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &config);
    if (cudnnBackendFinalize(plan->get()) != CUDNN_STATUS_SUCCESS) continue;  // not for this geometry
    std::int64_t workspace = 0;
    CUDNN_CHECK(cudnnBackendGetAttribute(plan->get(), CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1,
                                         &got, &workspace));
    if (workspace < 0 || static_cast<std::size_t>(workspace) > workspace_bytes_) continue;
    auto candidate = std::make_unique<Op>();
    candidate->plan = std::move(plan);
    CUDNN_CHECK(cudnnBackendGetAttribute(ed, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &got,
                                         &candidate->engine));
    if (deterministic_) {
      candidate->ms = -1.0f;
    } else {
      if (execute(*candidate, x, w, y) != CUDNN_STATUS_SUCCESS) continue;
      ++timed;
      CUDA_CHECK(cudaEventRecord(timing_start_, stream_));
      for (int r = 0; r < kTimedRuns; ++r) CUDNN_CHECK_STATUS(execute(*candidate, x, w, y));
      CUDA_CHECK(cudaEventRecord(timing_end_, stream_));
      CUDA_CHECK(cudaEventSynchronize(timing_end_));
      CUDA_CHECK(cudaEventElapsedTime(&candidate->ms, timing_start_, timing_end_));
      candidate->ms /= kTimedRuns;
      if (op->plan && op->ms <= candidate->ms) continue;
    }
    op->plan = std::move(candidate->plan);
    op->engine = candidate->engine;
    op->ms = candidate->ms;
    op->config = std::move(configs[static_cast<std::size_t>(i)]);
    op->pack.reset();  // the candidate's pack named its plan's buffers; rebuilt at the first run
    if (deterministic_) break;
  }
  if (!op->plan)
    throw CudaError("cuDNN has no " + std::string(deterministic_ ? "deterministic " : "") +
                    (fp32 ? "full-precision " : "") + "engine for the " + what + " within the " +
                    std::to_string(workspace_bytes_ >> 20) + " MiB workspace (" + std::to_string(count) +
                    " engine configurations proposed)");
  return op;
}

int CudnnConvolutions::plan(const ConvShape& s, void* x, void* w, void* y) {
  for (std::size_t i = 0; i < plans_.size(); ++i)
    if (plans_[i]->shape == s) return static_cast<int>(i);
  if (s.C % s.groups != 0 || s.K % s.groups != 0 || s.OH() < 1 || s.OW() < 1)
    throw std::invalid_argument("cudnn: convolution " + describe(s) + " has no valid output or groups");
  check_dimension(s.N, "N");
  check_dimension(s.C, "C");
  check_dimension(s.H, "H");
  check_dimension(s.W, "W");
  check_dimension(s.K, "K");
  check_dimension(s.R, "R");
  check_dimension(s.stride, "stride");
  check_dimension(s.padding, "padding", 0);
  check_dimension(s.dilation, "dilation");
  auto p = std::make_unique<Plan>();
  p->shape = s;
  const cudnnDataType_t dt = cudnn_data_type(precision_);
  p->x = tensor(kX, dt, s.N, s.C, s.H, s.W);
  p->w = tensor(kW, dt, s.K, s.C / s.groups, s.R, s.R);
  p->y = tensor(kY, dt, s.N, s.K, s.OH(), s.OW());
  p->conv = convolution(s);
  const std::string what = "convolution " + describe(s);
  p->forward = build(*p, Direction::forward, 0.0f, "forward " + what, x, w, y);
  for (int add = 0; add < 2; ++add) {
    p->data[add] = build(*p, Direction::data, static_cast<float>(add), "input gradient of the " + what, x, w, y);
    p->filter[add] = build(*p, Direction::filter, static_cast<float>(add), "weight gradient of the " + what, x, w, y);
  }
  plans_.push_back(std::move(p));
  return static_cast<int>(plans_.size() - 1);
}

void CudnnConvolutions::forward(int conv, void* y, const void* x, const void* w) {
  CUDNN_CHECK_STATUS(execute(*plans_.at(static_cast<std::size_t>(conv))->forward, x, w, y));
}

void CudnnConvolutions::backward_data(int conv, void* dx, const void* dy, const void* w, bool accumulate) {
  CUDNN_CHECK_STATUS(execute(*plans_.at(static_cast<std::size_t>(conv))->data[accumulate ? 1 : 0], dx, w, dy));
}

void CudnnConvolutions::backward_filter(int conv, void* dw, const void* dy, const void* x, bool accumulate) {
  CUDNN_CHECK_STATUS(execute(*plans_.at(static_cast<std::size_t>(conv))->filter[accumulate ? 1 : 0], x, dw, dy));
}

}  // namespace zeroplan::exec::cuda
