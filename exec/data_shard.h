// Each rank's deterministic share of the global batch. A step's global batch is world x grad_accum x micro_batch
// rows drawn in one piece from the token source; rank r trains rows [r*A*B, (r+1)*A*B), micro-step k of them
// rows [k*B, (k+1)*B). A one-rank run with A' = world x A micro-steps therefore sees the same rows in the same
// step, so the global batch (not the rank count) decides the result.
#pragma once

#include <cstdint>

#include "exec/token_data.h"

namespace zeroplan::exec {

TokenBatch next_rank_share(TokenSource& source, std::int64_t micro_batch, std::int64_t seq, std::int64_t grad_accum,
                           int world, int rank);

}  // namespace zeroplan::exec
