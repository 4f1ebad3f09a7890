#include "exec/data_shard.h"

#include <stdexcept>

namespace zeroplan::exec {

TokenBatch next_rank_share(TokenSource& source, std::int64_t micro_batch, std::int64_t seq, std::int64_t grad_accum,
                           int world, int rank) {
  if (world < 1 || rank < 0 || rank >= world) throw std::invalid_argument("next_rank_share: bad rank/world");
  const std::int64_t rows = micro_batch * grad_accum;
  TokenBatch global = source.next_batch(rows * world, seq);
  if (world == 1) return global;
  TokenBatch mine;
  const auto first = global.inputs.begin() + rank * rows * seq;
  mine.inputs.assign(first, first + rows * seq);
  const auto first_t = global.targets.begin() + rank * rows * seq;
  mine.targets.assign(first_t, first_t + rows * seq);
  return mine;
}

}  // namespace zeroplan::exec
