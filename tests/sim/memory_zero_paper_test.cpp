// The ZeRO paper's Table 1 (Rajbhandari et al., SC'20, arXiv 1910.02054): per-GPU model-state memory in GB
// (1e9 bytes) for mixed-precision Adam (K = 12), by data-parallel degree, for Pos (stage 1), Pos+g (stage 2)
// and Pos+g+p (stage 3). The table prints 3 significant figures for the 7.5B model and truncates the larger
// columns (1T at N = 64: 4187.5 printed as 4187), so each value is checked to within one unit of its last
// printed digit.
#include <gtest/gtest.h>

#include <cmath>

#include "sim/memory_inputs.h"
#include "sim/memory_model.h"
#include "sim/model_states_memory.h"
#include "tests/sim/sim_test_fixtures.h"

namespace zeroplan {
namespace {

using testing::params_only_model;
using testing::test_cluster;

double model_states_gb(std::int64_t params, int gpus, int stage) {
  const ModelDescription model = params_only_model(params);
  // N GPUs as one node per 8 (node shape does not change model states).
  const ClusterDescription cluster = gpus <= 8 ? test_cluster(gpus, 1) : test_cluster(8, gpus / 8);
  TrainingConfig training;
  training.precision = Precision::fp16;
  training.optimizer = OptimizerKind::adamw;  // K = 4 (fp32 master) + 8 (momentum, variance) = 12
  const PlanChoice choice{stage, OffloadDevice::none, OffloadDevice::none};
  const ModelStatesBytes states = model_states_bytes(gather_memory_inputs(model, cluster, training, choice));
  // The paper's model states: 16-bit params and grads, fp32 master, optimizer states.
  return static_cast<double>(states.params + states.grads + states.master_params + states.optimizer_states) / 1e9;
}

struct Row {
  int gpus;
  double pos, pos_g, pos_g_p;  // as printed
  double unit;                 // one unit of the last printed digit
};

void check_column(std::int64_t params, const std::vector<Row>& rows, const char* model) {
  for (const Row& row : rows) {
    SCOPED_TRACE(std::string(model) + ", N = " + std::to_string(row.gpus));
    EXPECT_NEAR(model_states_gb(params, row.gpus, 1), row.pos, row.unit);
    EXPECT_NEAR(model_states_gb(params, row.gpus, 2), row.pos_g, row.unit);
    EXPECT_NEAR(model_states_gb(params, row.gpus, 3), row.pos_g_p, row.unit);
  }
}

TEST(ZeroPaperTable1, SevenPointFiveBillionAtSixtyFourGpus) {
  // The paper's running example (sec. 5.4 and Figure 1): 120 GB baseline, 31.4 / 16.6 / 1.88 GB.
  const std::int64_t P = 7'500'000'000;
  EXPECT_DOUBLE_EQ(model_states_gb(P, 64, 0), 120.0);
  EXPECT_NEAR(model_states_gb(P, 64, 1), 31.4, 0.05);
  EXPECT_NEAR(model_states_gb(P, 64, 2), 16.6, 0.05);
  EXPECT_NEAR(model_states_gb(P, 64, 3), 1.88, 0.005);
}

TEST(ZeroPaperTable1, SevenPointFiveBillionColumn) {
  check_column(7'500'000'000,
               {{1, 120, 120, 120, 1},
                {4, 52.5, 41.3, 30, 0.1},
                {16, 35.6, 21.6, 7.5, 0.1},
                {64, 31.4, 16.6, 1.88, 0.1},
                {256, 30.4, 15.4, 0.47, 0.1},
                {1024, 30.1, 15.1, 0.12, 0.1}},
               "7.5B");
}

TEST(ZeroPaperTable1, OneHundredTwentyEightBillionColumn) {
  check_column(128'000'000'000,
               {{1, 2048, 2048, 2048, 1},
                {4, 896, 704, 512, 1},
                {16, 608, 368, 128, 1},
                {64, 536, 284, 32, 1},
                {256, 518, 263, 8, 1},
                {1024, 513, 257, 2, 1}},
               "128B");
}

TEST(ZeroPaperTable1, OneTrillionColumn) {
  check_column(1'000'000'000'000,
               {{1, 16000, 16000, 16000, 1},
                {4, 7000, 5500, 4000, 1},
                {16, 4750, 2875, 1000, 1},
                {64, 4187, 2218, 250, 1},
                {256, 4046, 2054, 62.5, 1},
                {1024, 4011, 2013, 15.6, 1}},
               "1T");
}

TEST(ZeroPaperTable1, BaselineIsSixteenBytesPerParameterAtAnyDegree) {
  for (int gpus : {1, 8, 64, 1024}) EXPECT_DOUBLE_EQ(model_states_gb(7'500'000'000, gpus, 0), 120.0);
}

}  // namespace
}  // namespace zeroplan
