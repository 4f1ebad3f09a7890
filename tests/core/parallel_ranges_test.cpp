// core/parallel_ranges.h: every index in exactly one piece, pieces contiguous and at most `threads`, none smaller than
// asked unless the range is, and a piece's exception rethrown once every piece has finished.
#include "core/parallel_ranges.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <mutex>
#include <stdexcept>
#include <utility>
#include <vector>

namespace zeroplan {
namespace {

std::vector<std::pair<std::int64_t, std::int64_t>> pieces_of(std::int64_t count, int threads, std::int64_t min_piece) {
  std::mutex m;
  std::vector<std::pair<std::int64_t, std::int64_t>> pieces;
  for_each_range(count, threads, min_piece, [&](std::int64_t b, std::int64_t e) {
    std::lock_guard<std::mutex> lock(m);
    pieces.emplace_back(b, e);
  });
  std::sort(pieces.begin(), pieces.end());
  return pieces;
}

TEST(ForEachRange, CoversTheRangeOnceInAtMostThreadsPieces) {
  for (std::int64_t count : {1, 2, 7, 100, 1000, 1001, 65537})
    for (int threads : {1, 2, 3, 8, 16})
      for (std::int64_t min_piece : {1, 10, 1000}) {
        SCOPED_TRACE(::testing::Message() << count << " " << threads << " " << min_piece);
        const auto pieces = pieces_of(count, threads, min_piece);
        ASSERT_FALSE(pieces.empty());
        EXPECT_LE(pieces.size(), static_cast<std::size_t>(threads));
        EXPECT_EQ(pieces.front().first, 0);
        EXPECT_EQ(pieces.back().second, count);
        for (std::size_t i = 0; i < pieces.size(); ++i) {
          EXPECT_LT(pieces[i].first, pieces[i].second);
          if (i > 0) EXPECT_EQ(pieces[i].first, pieces[i - 1].second);
          if (pieces.size() > 1) EXPECT_GE(pieces[i].second - pieces[i].first, min_piece);
        }
      }
  EXPECT_EQ(pieces_of(4000, 4, 1000).size(), 4u);
  EXPECT_EQ(pieces_of(3999, 4, 1000).size(), 3u);
}

TEST(ForEachRange, NothingForAnEmptyRange) {
  int calls = 0;
  for_each_range(0, 8, 1, [&](std::int64_t, std::int64_t) { ++calls; });
  for_each_range(-5, 8, 1, [&](std::int64_t, std::int64_t) { ++calls; });
  EXPECT_EQ(calls, 0);
}

TEST(ForEachRange, RethrowsAPiecesExceptionAfterAllPiecesFinish) {
  std::atomic<std::int64_t> done{0};
  EXPECT_THROW(for_each_range(8000, 8, 1000,
                              [&](std::int64_t b, std::int64_t e) {
                                if (b == 3000) throw std::runtime_error("piece 3");
                                done += e - b;
                              }),
               std::runtime_error);
  EXPECT_EQ(done.load(), 7000);
}

}  // namespace
}  // namespace zeroplan
