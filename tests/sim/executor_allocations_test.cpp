// The CUDA executor's list of allocations (exec/activation_accounting.h device_allocations), which the planner
// rounds to the device's pages, against its closed-form byte counts (expected_device_memory, which a GPU test holds
// to the CUDA allocator's tags): per component they must agree, whatever the precision, recompute and
// --deterministic; and the round-up is what 2 MiB pages make of them.
#include <gtest/gtest.h>

#include <map>
#include <string>

#include "exec/activation_accounting.h"
#include "exec/exec_config.h"

namespace zeroplan::exec {
namespace {

ExecConfig gpt2_config(ExecPrecision precision, ExecRecompute recompute, bool deterministic) {
  ExecConfig c;
  c.shape = make_shape(50257, 1600, 48, 25, 1024);
  c.micro_batch = 8;
  c.seq_len = 1024;
  c.precision = precision;
  c.recompute = recompute;
  c.zero.stage = 0;
  c.zero.deterministic = deterministic;
  return c;
}

TEST(ExecutorAllocations, SumPerComponentToTheExecutorsFormula) {
  for (ExecPrecision precision : {ExecPrecision::bf16, ExecPrecision::fp32})
    for (ExecRecompute recompute : {ExecRecompute::none, ExecRecompute::selective, ExecRecompute::full})
      for (bool deterministic : {false, true}) {
        const ExecConfig c = gpt2_config(precision, recompute, deterministic);
        std::map<std::string, std::int64_t> sums;
        for (const DeviceAllocation& a : device_allocations(c, 1)) sums[a.component] += a.bytes;
        for (const auto& [component, bytes] : expected_device_memory(c).components())
          EXPECT_EQ(sums[component], bytes) << component << " (" << to_string(precision) << ", recompute "
                                            << static_cast<int>(recompute) << ", deterministic "
                                            << deterministic << ")";
      }
}

TEST(ExecutorAllocations, LargeAllocationsRoundUpToPagesAndSmallOnesShareThem) {
  const std::int64_t page = kDeviceAllocationGranularity;
  EXPECT_EQ(allocation_granularity_bytes({{"a", page}}), 0);
  EXPECT_EQ(allocation_granularity_bytes({{"a", page + 1}}), page - 1);
  // Three small ones in one page; a page and a half rounds to two.
  EXPECT_EQ(allocation_granularity_bytes({{"a", 100}, {"b", 200}, {"c", 300}, {"d", 3 * page / 2}}),
            (page - 600) + page / 2);
}

}  // namespace
}  // namespace zeroplan::exec
