// CUDA graphs of a training micro-step (CUDA programming guide, "CUDA Graphs": stream capture): a layer-list
// network's micro-step is ~2,000 small kernels and cuDNN calls whose host-side cost exceeds their GPU time on
// CIFAR-sized images (ResNet-101 at micro-batch 128 on an H200: 48 ms a step launched one by one), so the trainer
// captures the work once and replays it with one launch, as torch.compile's "reduce-overhead" mode does. A graph names
// every buffer and kernel argument it was captured with, so one is kept per micro-step (the first writes the
// gradients, the others add to them); what changes from step to step is read from the device (the images, labels and
// fp16's loss gradient scale, uploaded before the launch). The ZeRO engine's part of a micro-step (its collectives,
// stage 3's all-gathers, ZeRO-Offload's gradient copies) is captured with it, and its host bookkeeping rerun after
// each launch (exec/zero/zero_engine.h, replay_graph_bookkeeping). Where capture fails (a library call that cannot
// be captured) the trainer either runs the work directly from then on and says so once on stderr, or stops.
#pragma once

#include <cstdint>
#include <cstdio>
#include <exception>
#include <stdexcept>
#include <string>
#include <vector>

#include <cuda_runtime.h>

#include "exec/cuda/cuda_check.h"

namespace zeroplan::exec::cuda {

class StepGraphs {
 public:
  StepGraphs() = default;
  ~StepGraphs() { clear(); }
  StepGraphs(const StepGraphs&) = delete;
  StepGraphs& operator=(const StepGraphs&) = delete;

  void enable(bool on) { enabled_ = on; }
  bool usable() const { return enabled_ && failed_.empty(); }

  // Whether micro-step `micro` has its graph already.
  bool captured(std::int64_t micro) const {
    for (const Entry& g : graphs_)
      if (g.micro == micro) return true;
    return false;
  }

  // Replays the graph of micro-step `micro` on `stream`.
  void replay(std::int64_t micro, cudaStream_t stream) {
    for (const Entry& g : graphs_)
      if (g.micro == micro) {
        CUDA_CHECK(cudaGraphLaunch(g.exec, stream));
        return;
      }
    throw std::logic_error("StepGraphs: micro-step " + std::to_string(micro) + " has no graph");
  }

  // Captures `work` (which enqueues micro-step `micro` on `stream`) and launches it. Where the capture fails,
  // `failed(reason)` decides: it returns true after running the work itself (a micro-step that can simply run
  // again), and from then on usable() is false; or it throws.
  template <typename Work, typename Failed>
  void capture(std::int64_t micro, cudaStream_t stream, Work&& work, Failed&& failed) {
    cudaGraph_t graph = nullptr;
    CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
    try {
      work();
    } catch (const std::exception& e) {
      cudaStreamEndCapture(stream, &graph);
      if (graph) cudaGraphDestroy(graph);
      cudaGetLastError();  // a capture error is not sticky; clear it
      failed_ = e.what();
      failed(failed_);
      return;
    }
    CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
    cudaGraphExec_t exec = nullptr;
    const cudaError_t err = cudaGraphInstantiate(&exec, graph, 0);
    cudaGraphDestroy(graph);
    CUDA_CHECK(err);
    graphs_.push_back(Entry{micro, exec});
    CUDA_CHECK(cudaGraphLaunch(exec, stream));
  }

 private:
  struct Entry {
    std::int64_t micro;
    cudaGraphExec_t exec;
  };
  void clear() noexcept {
    for (const Entry& g : graphs_) cudaGraphExecDestroy(g.exec);
    graphs_.clear();
  }
  bool enabled_ = false;
  std::string failed_;
  std::vector<Entry> graphs_;
};

}  // namespace zeroplan::exec::cuda
