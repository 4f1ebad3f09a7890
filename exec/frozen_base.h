// LoRA's frozen base set from a source, by tensor name: a checkpoint's states (--init-from) or the whole model's
// initialisation. The base engine (exec/zero/zero_engine.h, Trainability::frozen) holds the base's own layout, whose
// tensors are those of the source's layout with the same names; each is read from there into the engine's
// partition. What both trainers' set_frozen do (exec/cpu/cpu_trainer.cpp, exec/cuda/cuda_trainer.cu).
#pragma once

#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <vector>

#include "exec/param_layout.h"
#include "exec/zero/zero_engine.h"

namespace zeroplan::exec {

inline void restore_frozen_base(ZeroEngine& base_engine, const ParamLayout& base, const ParamLayout& source_layout,
                                const ZeroEngine::StateSource& source) {
  std::vector<const ParamTensor*> from(base.tensors().size(), nullptr);
  for (std::size_t i = 0; i < base.tensors().size(); ++i)
    for (const ParamTensor& t : source_layout.tensors())
      if (t.name == base.tensors()[i].name) from[i] = &t;
  base_engine.restore_state(
      [&](std::int64_t begin, std::int64_t n, float* master, float*, float*) {
        std::fill(master, master + n, 0.0f);
        for (std::size_t i = 0; i < base.tensors().size(); ++i) {
          const ParamTensor& t = base.tensors()[i];
          const std::int64_t lo = std::max(begin, t.offset), hi = std::min(begin + n, t.offset + t.numel());
          if (lo >= hi) continue;
          if (!from[i]) throw std::invalid_argument("set_frozen: the source has no tensor " + t.name);
          source(from[i]->offset + (lo - t.offset), hi - lo, master + (lo - begin), nullptr, nullptr);
        }
      },
      0);
}

}  // namespace zeroplan::exec
