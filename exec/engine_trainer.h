// What every trainer does the same way through its ZeRO engine and loss scaler: the states for tests and
// checkpoints, and a step's communication and offload times. The backends (cpu/cpu_trainer.cpp,
// cpu/cpu_network_trainer.cpp, cuda/cuda_trainer.cu) own the engine and the scaler, in the order their
// destruction needs, and attach them here once made.
#pragma once

#include <chrono>
#include <cmath>
#include <cstdint>
#include <utility>
#include <vector>

#include "exec/loss_scaler.h"
#include "exec/trainer.h"
#include "exec/zero/zero_engine.h"

namespace zeroplan::exec {

class EngineTrainer : public Trainer {
 public:
  std::vector<float> params() const override { return engine_->gathered_params(); }
  std::vector<float> grads() const override { return engine_->gathered_grads(scaler_->scale()); }
  void set_params(const std::vector<float>& flat) override { engine_->set_params(flat); }
  std::vector<std::pair<std::int64_t, std::int64_t>> owned_ranges() const override { return engine_->owned_ranges(); }
  void read_owned_state(std::vector<float>& master, std::vector<float>& m, std::vector<float>& v) override {
    engine_->read_owned_state(master, m, v);
  }
  int optimizer_step() const override { return engine_->optimizer_step(); }
  LossScalerState loss_scaler_state() const override { return scaler_->state(); }
  void restore_state(const ZeroEngine::StateSource& source, int optimizer_step,
                     const LossScalerState& scaler) override {
    engine_->restore_state(source, optimizer_step);
    scaler_->restore(scaler);
  }

 protected:
  void attach(ZeroEngine& engine, LossScaler& scaler) {
    engine_ = &engine;
    scaler_ = &scaler;
  }
  // The end of a step timed on the host clock (the CPU backends), after the micro-steps and the loss's reduction:
  // the reduced gradients, the global norm, the loss scaler's verdict and the update (ZeroEngine::finish_step), then
  // the phase times from step_start.
  void finish_host_step(StepResult& r, double forward_s, double backward_s,
                        std::chrono::steady_clock::time_point step_start, std::chrono::steady_clock::time_point optimizer_start) {
    r.grad_norm = engine_->finish_step(scaler_->scale(), [&](double norm) {
      r.skipped = scaler_->update(!std::isfinite(norm));
      return r.skipped;
    });
    const auto end = std::chrono::steady_clock::now();
    r.times.forward_s = forward_s;
    r.times.backward_s = backward_s;
    r.times.optimizer_s = std::chrono::duration<double>(end - optimizer_start).count();
    r.times.step_s = std::chrono::duration<double>(end - step_start).count();
    record_engine_times(r.times);
  }
  // After finish_step: the step's busy time per collective kind, what the compute lane waited for, the offload.
  void record_engine_times(StepTimes& t) const {
    const CommTimes& ct = engine_->last_comm_times();
    for (int k = 0; k < kCommKinds; ++k) t.comm_s[k] = ct.seconds[k];
    t.exposed_comm_s = ct.exposed_s;
    t.offload = engine_->last_offload_times();
    t.timeline = engine_->last_timeline();
  }

 private:
  ZeroEngine* engine_ = nullptr;
  LossScaler* scaler_ = nullptr;
};

}  // namespace zeroplan::exec
