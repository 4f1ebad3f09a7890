// The ZeRO engine's part in CUDA graphs of a micro-step (exec/zero/zero_engine.h, exec/cuda/step_graphs.cuh): the
// lanes joined around a capture and a launch, the micro-step's engine calls logged while it is captured, and rerun
// after each launch with the device and the communicator in GraphMode::replayed.
#include "exec/zero/zero_engine.h"

#include <stdexcept>
#include <string>

namespace zeroplan::exec {

void ZeroEngine::set_graph_mode(GraphMode mode) {
  device_.set_graph_mode(mode);
  comm_.set_graph_mode(mode);
}

void ZeroEngine::join_lanes() {
  for (Lane lane : {Lane::comm, Lane::to_host, Lane::to_device}) device_.lane_waits_for(Lane::compute, lane);
}

void ZeroEngine::follow_graph() {
  for (Lane lane : {Lane::comm, Lane::to_host, Lane::to_device}) device_.lane_waits_for(lane, Lane::compute);
}

void ZeroEngine::begin_graph_capture(std::int64_t micro) {
  if (micro != micro_) throw std::logic_error("ZeroEngine: capture of micro-step " + std::to_string(micro) +
                                              " inside micro-step " + std::to_string(micro_));
  if (graph_calls_.size() <= static_cast<std::size_t>(micro)) graph_calls_.resize(static_cast<std::size_t>(micro) + 1);
  graph_calls_[static_cast<std::size_t>(micro)].clear();
  set_graph_mode(GraphMode::capturing);
  // Every lane forks from the compute lane at the capture's start (stage 3's first all-gather, say, has no
  // captured work to wait for otherwise) and joins it again at the end.
  for (Lane lane : {Lane::comm, Lane::to_host, Lane::to_device}) device_.lane_waits_for(lane, Lane::compute);
  graph_logging_ = true;
}

void ZeroEngine::end_graph_capture() {
  join_lanes();
  graph_logging_ = false;
  set_graph_mode(GraphMode::eager);
}

void ZeroEngine::abandon_graph_capture() {
  graph_logging_ = false;
  set_graph_mode(GraphMode::eager);
}

void ZeroEngine::replay_graph_bookkeeping(std::int64_t micro) {
  if (micro != micro_ || static_cast<std::size_t>(micro) >= graph_calls_.size())
    throw std::logic_error("ZeroEngine: no captured micro-step " + std::to_string(micro));
  // (The communicator watches the replayed collectives through events recorded on its lane: after the graph.)
  follow_graph();
  set_graph_mode(GraphMode::replayed);
  try {
    for (const GraphCall& c : graph_calls_[static_cast<std::size_t>(micro)]) {
      switch (c.kind) {
        case GraphCall::params_needed: params_needed(c.lo, c.hi); break;
        case GraphCall::prepare_gradients: prepare_gradients(c.lo, c.hi); break;
        case GraphCall::gradients_final_from: gradients_final_from(c.lo); break;
      }
    }
  } catch (...) {
    set_graph_mode(GraphMode::eager);
    throw;
  }
  set_graph_mode(GraphMode::eager);
}

}  // namespace zeroplan::exec
