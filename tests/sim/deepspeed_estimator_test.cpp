// DeepSpeed's estimators against the figures its documentation prints. The estimators print
// bytes / 2**30 with two decimals and call it "GB".
//
// The two documented examples and their exact parameter counts (derived here from the T5 architecture,
// Raffel et al. 2020, as AutoModel loads it: T5Model, shared embedding counted once, no lm_head):
//   - DeepSpeed docs (docs/code-docs/source/memory.rst), "t5-3b", 1 node x 8 GPUs: 2,851,598,336 params
//     ("2851M"), largest layer 32,128 x 1,024 = 32,899,072.
//   - Hugging Face docs (transformers deepspeed.md), "bigscience/T0_3B" (T5 v1.1 XL, gated-GELU), 1 node x 1 and
//     x 2 GPUs: 2,783,959,040 params ("2783M"), largest layer 32,128 x 2,048 = 65,798,144 ("65M").
#include <gtest/gtest.h>

#include <cstdio>

#include "sim/deepspeed_estimator.h"

namespace zeroplan {
namespace {

std::string gib(Bytes bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.2f", static_cast<double>(bytes) / static_cast<double>(1LL << 30));
  return text;
}

// T5: per encoder layer 4 d*inner (attention) + FF + 2 norms of d; per decoder layer a second attention and norm;
// relative attention bias (32 buckets x heads) in the first layer of each stack; a final norm per stack.
std::int64_t t5_params(std::int64_t d, std::int64_t inner, std::int64_t ff_params, std::int64_t heads,
                       std::int64_t layers, std::int64_t vocab) {
  const std::int64_t attention = 4 * d * inner;
  const std::int64_t encoder = layers * (attention + ff_params + 2 * d) + 32 * heads + d;
  const std::int64_t decoder = layers * (2 * attention + ff_params + 3 * d) + 32 * heads + d;
  return encoder + decoder + vocab * d;
}

const std::int64_t kT5_3b = t5_params(1024, 4096, 2 * 1024 * 16384, 32, 24, 32128);
const std::int64_t kT0_3b = t5_params(2048, 2048, 3 * 2048 * 5120, 32, 24, 32128);

TEST(DeepSpeedEstimator, DocumentedModelsHaveTheDocumentedSizes) {
  EXPECT_EQ(kT5_3b, 2'851'598'336);
  EXPECT_EQ(kT5_3b / 1'000'000, 2851);
  EXPECT_EQ(kT0_3b, 2'783'959'040);
  EXPECT_EQ(kT0_3b / 1'000'000, 2783);
}

TEST(DeepSpeedEstimator, Stage3RowsReproduceTheDeepSpeedDocsForT5_3b) {
  const auto rows = deepspeed_rows(kT5_3b, 32128LL * 1024, 8, 1);
  ASSERT_EQ(rows.size(), 8u);
  const char* expected[6][3] = {
      {"71.71", "0.12", "offload_param=cpu, offload_optimizer=cpu, zero_init=1"},
      {"127.48", "0.12", "offload_param=cpu, offload_optimizer=cpu, zero_init=0"},
      {"63.74", "0.79", "offload_param=none, offload_optimizer=cpu, zero_init=1"},
      {"127.48", "0.79", "offload_param=none, offload_optimizer=cpu, zero_init=0"},
      {"1.47", "6.10", "offload_param=none, offload_optimizer=none, zero_init=1"},
      {"127.48", "6.10", "offload_param=none, offload_optimizer=none, zero_init=0"}};
  for (int i = 0; i < 6; ++i) {
    SCOPED_TRACE(expected[i][2]);
    EXPECT_EQ(gib(rows[2 + i].host_bytes), expected[i][0]);
    EXPECT_EQ(gib(rows[2 + i].gpu_bytes), expected[i][1]);
    EXPECT_EQ(rows[2 + i].row, expected[i][2]);
  }
}

TEST(DeepSpeedEstimator, Stage2DocsFiguresComeFromThePreJune2024Formula) {
  // Docs: 127.48 | 5.31 offload_optimizer=cpu; 127.48 | 15.93 offload_optimizer=none.
  EXPECT_EQ(gib(zero2_host_bytes(kT5_3b, 8, 1, true)), "127.48");
  EXPECT_EQ(gib(zero2_gpu_bytes(kT5_3b, 8, 1, true)), "5.31");
  EXPECT_EQ(gib(zero2_host_bytes(kT5_3b, 8, 1, false)), "127.48");
  EXPECT_EQ(gib(zero2_gpu_bytes_before_june_2024(kT5_3b, 8, 1, false)), "15.93");
  // The current code (2P + int(18P/N)) gives less: 2 * 2,851,598,336 + int(18 * 2,851,598,336 / 8).
  EXPECT_EQ(zero2_gpu_bytes(kT5_3b, 8, 1, false), 2 * kT5_3b + 18 * kT5_3b / 8);
  EXPECT_EQ(gib(zero2_gpu_bytes(kT5_3b, 8, 1, false)), "11.29");
  const auto rows = deepspeed_rows(kT5_3b, 32128LL * 1024, 8, 1);
  EXPECT_EQ(rows[0].row, "offload_optimizer=cpu");
  EXPECT_EQ(rows[1].row, "offload_optimizer=none");
  EXPECT_EQ(rows[1].gpu_bytes, zero2_gpu_bytes(kT5_3b, 8, 1, false));
}

TEST(DeepSpeedEstimator, Stage3RowsReproduceTheHuggingFaceDocsForT0_3bOnOneAndTwoGpus) {
  const std::int64_t largest = 32128LL * 2048;
  const char* one_gpu[6][2] = {{"70.00", "0.25"}, {"70.00", "0.25"}, {"62.23", "5.43"},
                               {"62.23", "5.43"}, {"0.37", "46.91"}, {"15.56", "46.91"}};
  const auto rows1 = deepspeed_rows(kT0_3b, largest, 1, 1);
  for (int i = 0; i < 6; ++i) {
    SCOPED_TRACE(rows1[2 + i].row);
    EXPECT_EQ(gib(rows1[2 + i].host_bytes), one_gpu[i][0]);
    EXPECT_EQ(gib(rows1[2 + i].gpu_bytes), one_gpu[i][1]);
  }
  const char* two_gpus[6][2] = {{"70.00", "0.25"}, {"70.00", "0.25"}, {"62.23", "2.84"},
                                {"62.23", "2.84"}, {"0.74", "23.58"}, {"31.11", "23.58"}};
  const auto rows2 = deepspeed_rows(kT0_3b, largest, 2, 1);
  for (int i = 0; i < 6; ++i) {
    SCOPED_TRACE(rows2[2 + i].row);
    EXPECT_EQ(gib(rows2[2 + i].host_bytes), two_gpus[i][0]);
    EXPECT_EQ(gib(rows2[2 + i].gpu_bytes), two_gpus[i][1]);
  }
}

TEST(DeepSpeedEstimator, TruncatesLikePythonInt) {
  // int(18 * 7 / 4) = int(31.5) = 31; int(7 * 16 * 1.5) = 168.
  EXPECT_EQ(estimate_zero3(7, 0, 4, 1, false, false, true).gpu_bytes, 31);
  EXPECT_EQ(estimate_zero3(7, 1, 4, 1, true, false, true).host_bytes, 168);
  EXPECT_EQ(zero2_gpu_bytes(7, 4, 1, false), 14 + 31);
}

TEST(DeepSpeedEstimator, OffloadCpuTermUsesTotalGpusAcrossNodes) {
  // 2 nodes x 8 GPUs: max(4 * 16, 16) = 64 per parameter (the code's total_gpus), times f = 1.5.
  EXPECT_EQ(zero2_host_bytes(1'000'000, 8, 2, true), 96'000'000);
  // Stage 3 divides by the node count (gpus_factor = 1 / num_nodes).
  EXPECT_EQ(estimate_zero3(1'000'000, 0, 8, 2, true, true, true).host_bytes, 13'500'000);
}

TEST(DeepSpeedEstimator, CoveredPlanChoices) {
  EXPECT_FALSE(deepspeed_estimate_for({0, OffloadDevice::none, OffloadDevice::none}, 1000, 10, 8, 1));
  EXPECT_FALSE(deepspeed_estimate_for({3, OffloadDevice::nvme, OffloadDevice::none}, 1000, 10, 8, 1));
  EXPECT_FALSE(deepspeed_estimate_for({3, OffloadDevice::cpu, OffloadDevice::nvme}, 1000, 10, 8, 1));
  const auto stage1 = deepspeed_estimate_for({1, OffloadDevice::cpu, OffloadDevice::none}, 1000, 10, 8, 1);
  ASSERT_TRUE(stage1);
  EXPECT_EQ(stage1->stage, 1);
  EXPECT_EQ(stage1->gpu_bytes, 2000);
  const auto stage3 = deepspeed_estimate_for({3, OffloadDevice::cpu, OffloadDevice::cpu}, 1000, 10, 8, 1);
  ASSERT_TRUE(stage3);
  EXPECT_TRUE(stage3->zero_init);
  EXPECT_EQ(stage3->gpu_bytes, 40);
}

}  // namespace
}  // namespace zeroplan
