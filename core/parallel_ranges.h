// Contiguous pieces of an index range run on several threads: for host work done once per run whose pieces are
// independent and whose result must not depend on the thread count (initialising and quantising a frozen base of
// billions of elements: QLoRA's Llama-2 7B took over four minutes on one thread, issue 38). Each piece is given to
// exactly one thread and writes only its own outputs, so the result is the single-threaded one, bit for bit.
#pragma once

#include <cstdint>
#include <functional>

namespace zeroplan {

// Calls piece(begin, end) over [0, count) cut into at most `threads` contiguous pieces of at least `min_piece`
// indices each (one piece, on the calling thread, when count < 2 * min_piece or threads <= 1); the first piece runs
// on the calling thread, the others on threads started for the call and joined before it returns. The first
// exception a piece threw is rethrown (the others' pieces still finish). count <= 0 calls nothing.
void for_each_range(std::int64_t count, int threads, std::int64_t min_piece,
                    const std::function<void(std::int64_t begin, std::int64_t end)>& piece);

}  // namespace zeroplan
