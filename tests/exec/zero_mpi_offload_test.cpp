// ZeRO-Offload and ZeRO-Infinity over MPI (the CPU backend's communicator), in the binary test_zero_mpi.cpp's main()
// runs under mpirun with 2 and 4 ranks: the optimizer on the host, or on NVMe, and the 16-bit parameters on the host
// or on NVMe, each must train exactly as the run without them (losses, gradient norms, parameters and optimizer
// states), checkpoints restore them, and bad offload settings are refused by name.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "core/input_error.h"
#include "exec/comm/mpi_communicator.h"
#include "exec/offload/nvme_io.h"
#include "exec/data_shard.h"
#include "exec/trainer.h"
#include "tests/exec/zero_mpi_support.h"

using namespace zeroplan::exec;
using namespace zeroplan::exec::mpi_test;

namespace {

// Trains a and b side by side for 8 steps over the same data: losses and gradient norms equal at every step
// (`each` checks more of each pair), some step clipped, and the parameters and optimizer states equal after.
void expect_equal_runs(Trainer& a, Trainer& b, const ExecConfig& c,
                       const std::function<void(const StepResult&, const StepResult&)>& each) {
  Communicator& comm = *world_comm;
  TokenSource data_a = TokenSource::synthetic(vocab(), 5), data_b = TokenSource::synthetic(vocab(), 5);
  int clipped = 0;
  for (int step = 0; step < 8; ++step) {
    const TokenBatch ba = next_rank_share(data_a, c.micro_batch, c.seq_len, c.grad_accum, comm.world(), comm.rank());
    const TokenBatch bb = next_rank_share(data_b, c.micro_batch, c.seq_len, c.grad_accum, comm.world(), comm.rank());
    const StepResult ra = a.step(ba.inputs, ba.targets);
    const StepResult rb = b.step(bb.inputs, bb.targets);
    ASSERT_EQ(ra.loss, rb.loss) << "step " << step;
    ASSERT_EQ(ra.grad_norm, rb.grad_norm) << "step " << step;
    clipped += ra.grad_norm > c.optimizer.grad_clip;
    each(ra, rb);
  }
  EXPECT_GT(clipped, 0) << "no step clipped: the clipping factor was not exercised";
  const auto pa = a.params(), pb = b.params();
  ASSERT_EQ(pa.size(), pb.size());
  std::size_t differ = 0;
  for (std::size_t i = 0; i < pa.size(); ++i) differ += pa[i] != pb[i];
  EXPECT_EQ(differ, 0u) << "parameters after 8 steps, stage " << c.zero.stage << ", A = " << c.grad_accum;
  std::vector<float> ma, mb, m1, m2, v1, v2;
  a.read_owned_state(ma, m1, v1);
  b.read_owned_state(mb, m2, v2);
  EXPECT_EQ(ma, mb) << "master";
  EXPECT_EQ(m1, m2) << "AdamW momentum";
  EXPECT_EQ(v1, v2) << "AdamW variance";
}

// ZeRO-Offload against the same run without it, at the same world size: the CPU AdamW (exec/offload/cpu_adamw.h)
// is bit for bit the CPU backend's AdamW, and the offloaded states take the same values in the same order, so
// losses, gradient norms, parameters and optimizer states must be equal, not close.
// sub_group: the pieces the partition is updated in (sub_group_size), so that pieces split buckets.
void expect_offload_equals_no_offload(int stage, std::int64_t grad_accum, std::int64_t bucket_elements,
                                      std::int64_t sub_group = 1000000000) {
  Communicator& comm = *world_comm;
  ExecConfig plain = small_config(stage, grad_accum, bucket_elements);
  ExecConfig offloaded = plain;
  offloaded.zero.offload_optimizer = true;
  offloaded.zero.sub_group_elements = sub_group;
  auto a = make_cpu_trainer(plain, &comm);
  auto b = make_cpu_trainer(offloaded, &comm);
  expect_equal_runs(*a, *b, plain, [](const StepResult& ra, const StepResult& rb) {
    EXPECT_GT(rb.times.offload.pieces, 0);
    EXPECT_EQ(ra.times.offload.pieces, 0);
  });
  // Nothing of the optimizer on the "device"; the states in host memory.
  const MemoryReport mem = b->memory();
  EXPECT_EQ(mem.component("optimizer_states"), 0);
  EXPECT_EQ(mem.component("master_params"), 0);
  EXPECT_GT(mem.host_total(), 0);
  EXPECT_EQ(a->memory().host_total(), 0);
}

}  // namespace

TEST(ZeroOffloadOverMpi, Stage1EqualsNoOffload) { expect_offload_equals_no_offload(1, 1, 20000); }
TEST(ZeroOffloadOverMpi, Stage1WithAccumulationEqualsNoOffload) { expect_offload_equals_no_offload(1, 3, 5000); }
TEST(ZeroOffloadOverMpi, Stage2EqualsNoOffload) { expect_offload_equals_no_offload(2, 1, 20000); }
TEST(ZeroOffloadOverMpi, Stage2WithAccumulationEqualsNoOffload) { expect_offload_equals_no_offload(2, 3, 5000); }
TEST(ZeroOffloadOverMpi, Stage2PiecesSplitBuckets) { expect_offload_equals_no_offload(2, 2, 20000, 999); }
TEST(ZeroOffloadOverMpi, Stage3PiecesSplitBuckets) { expect_offload_equals_no_offload(3, 1, 20000, 1000); }
TEST(ZeroOffloadOverMpi, Stage3EqualsNoOffload) { expect_offload_equals_no_offload(3, 1, 20000); }
TEST(ZeroOffloadOverMpi, Stage3WithAccumulationEqualsNoOffload) { expect_offload_equals_no_offload(3, 2, 5000); }

namespace {

std::int64_t host_component(const MemoryReport& m, const std::string& name) {
  for (const auto& [n, b] : m.host_by_component)
    if (n == name) return b;
  return 0;
}

// set_params and restore_state (what a checkpoint's resume calls) from b's parameters and owned states: c then
// continues exactly as b.
void expect_restored_continues(Trainer& b, Trainer& c, const ExecConfig& config) {
  Communicator& comm = *world_comm;
  const auto pb = b.params();
  std::vector<float> mb, m2, v2;
  b.read_owned_state(mb, m2, v2);
  c.set_params(pb);
  EXPECT_EQ(c.params(), pb) << "set_params";
  const auto ranges = b.owned_ranges();
  c.restore_state(
      [&](std::int64_t flat, std::int64_t n, float* master, float* m, float* v) {
        std::int64_t at = 0;
        for (const auto& [begin, count] : ranges) {
          if (flat >= begin && flat + n <= begin + count) {
            const std::int64_t i = at + (flat - begin);
            std::copy(mb.begin() + i, mb.begin() + i + n, master);
            if (m) std::copy(m2.begin() + i, m2.begin() + i + n, m);
            if (v) std::copy(v2.begin() + i, v2.begin() + i + n, v);
            return;
          }
          at += count;
        }
        // persistent tensors, whole: their values from the gathered parameters
        std::copy(pb.begin() + flat, pb.begin() + flat + n, master);
      },
      b.optimizer_step(), b.loss_scaler_state());
  TokenSource data_b = TokenSource::synthetic(vocab(), 6);
  for (int step = 0; step < 2; ++step) {
    const TokenBatch bb = next_rank_share(data_b, config.micro_batch, config.seq_len, config.grad_accum, comm.world(),
                                          comm.rank());
    const StepResult rb = b.step(bb.inputs, bb.targets);
    const StepResult rc = c.step(bb.inputs, bb.targets);
    ASSERT_EQ(rb.loss, rc.loss) << "restored, step " << step;
  }
  EXPECT_EQ(b.params(), c.params()) << "restored";
}

// ZeRO-Infinity parameter offload (offload_param cpu, stage 3) against stage 3 without it, at the same world
// size: the host partition holds the values the device partition would (each chunk copied to a staging buffer
// and all-gathered from there), and AdamW (device or CPU) computes the same update, so losses, norms,
// parameters and states must be equal, not close. buffer_count: the staging buffers (1 forces every gather
// group down to one chunk and every buffer to be reused within a unit).
void expect_param_offload_equals_no_offload(std::int64_t grad_accum, std::int64_t bucket_elements,
                                            bool offload_optimizer, std::int64_t buffer_count,
                                            std::int64_t persistence = 300) {
  Communicator& comm = *world_comm;
  ExecConfig plain = small_config(3, grad_accum, bucket_elements);
  plain.zero.param_persistence_threshold = persistence;
  ExecConfig offloaded = plain;
  offloaded.zero.offload_param = true;
  offloaded.zero.offload_optimizer = offload_optimizer;
  offloaded.zero.param_buffer_count = buffer_count;
  auto a = make_cpu_trainer(plain, &comm);
  auto b = make_cpu_trainer(offloaded, &comm);
  double h2d = 0, d2h = 0;
  expect_equal_runs(*a, *b, plain, [&](const StepResult& ra, const StepResult& rb) {
    EXPECT_EQ(ra.times.offload.param_to_device_s, 0.0);
    h2d += rb.times.offload.param_to_device_s;
    d2h += rb.times.offload.param_to_host_s;
  });
  EXPECT_GT(h2d, 0) << "no parameter copied host to device";
  // The device AdamW's results are copied back; the CPU AdamW writes the host partition itself.
  if (offload_optimizer) EXPECT_EQ(d2h, 0.0);
  else EXPECT_GT(d2h, 0);
  // No parameter partition on the "device": staging buffers instead; the partition in host memory (in fp32
  // training with the optimizer offloaded too, the host master is the partition).
  const MemoryReport mem = b->memory();
  EXPECT_EQ(mem.component("params"), 0);
  EXPECT_GT(a->memory().component("params"), 0);
  EXPECT_GT(mem.component("offload_buffers"), 0);
  EXPECT_EQ(host_component(mem, "offload_params") > 0, !offload_optimizer);
  // set_params and checkpoints' restore_state write the host partition.
  auto c = make_cpu_trainer(offloaded, &comm);
  expect_restored_continues(*b, *c, plain);
}

}  // namespace

namespace {

}  // namespace

// A directory for the NVMe swap files of this test and world size (every rank's files go in its own
// zeroplan_rank<r> below it), on the build directory's disk: /tmp may be a tmpfs without direct I/O. Empty when
// that disk has no direct I/O either (the store says so): the caller skips.
std::string zeroplan::exec::mpi_test::nvme_dir(const std::string& test) {
  // The model is in the name: ctest runs the GPT-2 and the Llama binaries of one world size side by side.
  const std::string dir = std::string(ZEROPLAN_TEST_SCRATCH_DIR) + "/nvme_" + (llama_model ? "llama_" : "") + test +
                          "_world" + std::to_string(world_comm->world());
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  try {
    zeroplan::exec::offload::NvmeStore probe(dir, world_comm->rank());
  } catch (const zeroplan::InputError& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return "";
  }
  return dir;
}

namespace {

// ZeRO-Infinity's optimizer offload (offload_optimizer nvme) against offload to the CPU at the same world size:
// the same CPU AdamW on the same pieces, the states only swapped through files in between, so losses, norms,
// parameters and states must be equal, not close. sub_group: the pieces (several per bucket); buffer_count: the
// swap buffers (1: no overlap, each piece read after the previous one is written back).
void expect_nvme_equals_cpu_offload(int stage, std::int64_t grad_accum, std::int64_t sub_group,
                                    std::int64_t buffer_count, const std::string& test) {
  const std::string dir = nvme_dir(test);
  if (dir.empty()) GTEST_SKIP() << "no directory with direct I/O (O_DIRECT) under " << ZEROPLAN_TEST_SCRATCH_DIR;
  Communicator& comm = *world_comm;
  ExecConfig cpu = small_config(stage, grad_accum, 5000);
  cpu.zero.offload_optimizer = true;
  cpu.zero.sub_group_elements = sub_group;
  ExecConfig nvme = cpu;
  nvme.zero.nvme_path = dir;
  nvme.zero.optimizer_buffer_count = buffer_count;
  auto a = make_cpu_trainer(cpu, &comm);
  auto b = make_cpu_trainer(nvme, &comm);
  const std::int64_t files = b->memory().nvme_bytes;
  EXPECT_GT(files, 0);
  expect_equal_runs(*a, *b, cpu, [&](const StepResult& ra, const StepResult& rb) {
    EXPECT_EQ(ra.times.offload.pieces, rb.times.offload.pieces);
    EXPECT_EQ(ra.times.offload.nvme_read_bytes, 0);
    // Every piece swapped in and out once per step.
    EXPECT_EQ(rb.times.offload.nvme_read_bytes, files);
    EXPECT_EQ(rb.times.offload.nvme_write_bytes, files);
  });
  // The states are on disk: the host keeps the gradient partition, the updated parameters and the swap buffers.
  const MemoryReport mem = b->memory();
  EXPECT_EQ(host_component(mem, "offload_master_params"), 0);
  EXPECT_EQ(host_component(mem, "offload_optimizer_states"), 0);
  EXPECT_GT(host_component(mem, "offload_swap_buffers"), 0);
  EXPECT_EQ(a->memory().nvme_bytes, 0);
  // The files hold at least the three fp32 states of the partition (each piece's padded to 4096 bytes).
  std::int64_t owned = 0;
  for (const auto& r : b->owned_ranges()) owned += r.second;
  EXPECT_GE(files, 12 * owned);
  auto c = make_cpu_trainer(nvme, &comm);
  expect_restored_continues(*b, *c, cpu);
}

}  // namespace

TEST(ZeroNvmeOffloadOverMpi, Stage1EqualsCpuOffload) { expect_nvme_equals_cpu_offload(1, 1, 999, 4, "s1"); }
TEST(ZeroNvmeOffloadOverMpi, Stage2WithAccumulationEqualsCpuOffload) {
  expect_nvme_equals_cpu_offload(2, 3, 999, 4, "s2");
}
TEST(ZeroNvmeOffloadOverMpi, Stage3EqualsCpuOffload) { expect_nvme_equals_cpu_offload(3, 2, 1000, 4, "s3"); }
TEST(ZeroNvmeOffloadOverMpi, OneSwapBuffer) { expect_nvme_equals_cpu_offload(3, 1, 999, 1, "b1"); }
TEST(ZeroNvmeOffloadOverMpi, TwoSwapBuffersWholeBuckets) { expect_nvme_equals_cpu_offload(2, 1, 1000000000, 2, "b2"); }

TEST(ZeroNvmeOffloadOverMpi, UnusablePathIsAnInputErrorNamingTheField) {
  ExecConfig c = small_config(3, 1, 20000);
  c.zero.offload_optimizer = true;
  c.zero.nvme_path = std::string(ZEROPLAN_TEST_SCRATCH_DIR) + "/no_such_directory";
  try {
    make_cpu_trainer(c, world_comm);
    ADD_FAILURE() << "a missing nvme_path was accepted";
  } catch (const zeroplan::InputError& e) {
    EXPECT_NE(std::string(e.what()).find("zero_optimization.offload_optimizer.nvme_path"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("does not exist"), std::string::npos) << e.what();
  }
  c.zero.nvme_path = ZEROPLAN_TEST_SCRATCH_DIR;
  c.zero.optimizer_buffer_count = 0;
  EXPECT_THROW(make_cpu_trainer(c, world_comm), std::invalid_argument);
}

namespace {

// ZeRO-Infinity's parameter offload to NVMe (offload_param nvme) against offload_param cpu at the same world size:
// the chunks only go through files and swap buffers in between, so losses, norms, parameters and states must be
// equal, not close (the --deterministic equivalence: the CPU backend is deterministic by construction). Every step
// reads each chunk on NVMe of every all-gather of the fetch plan and writes every chunk once, whole 4096-byte
// blocks, exactly the figures the planner reads (zero_buffer_layout.h); checkpoints' set_params and restore_state
// write the files and the run continues bit for bit.
struct ParamNvmeCase {
  std::int64_t grad_accum = 1;
  std::int64_t bucket_elements = 20000;
  bool offload_optimizer = false;
  bool optimizer_nvme = false;
  std::int64_t buffer_count = 5;
  std::int64_t max_in_cpu = 0;
  std::int64_t persistence = 300;
};

void expect_param_nvme_equals_param_cpu(const ParamNvmeCase& k, const std::string& test) {
  const std::string dir = nvme_dir("param_" + test);
  if (dir.empty()) GTEST_SKIP() << "no directory with direct I/O (O_DIRECT) under " << ZEROPLAN_TEST_SCRATCH_DIR;
  Communicator& comm = *world_comm;
  ExecConfig cpu = small_config(3, k.grad_accum, k.bucket_elements);
  cpu.zero.param_persistence_threshold = k.persistence;
  cpu.zero.offload_param = true;
  cpu.zero.offload_optimizer = k.offload_optimizer;
  cpu.zero.param_buffer_count = k.buffer_count;
  if (k.optimizer_nvme) cpu.zero.nvme_path = dir;
  ExecConfig nvme = cpu;
  nvme.zero.param_nvme_path = dir;
  nvme.zero.param_max_in_cpu = k.max_in_cpu;
  auto a = make_cpu_trainer(cpu, &comm);
  auto b = make_cpu_trainer(nvme, &comm);
  const ZeroPartition partition(b->layout(), comm.world(), comm.rank(), partition_rules(nvme.zero));
  const ZeroBufferLayout buffers = zero_buffer_layout(b->layout(), partition, nvme.zero, k.grad_accum);
  const std::int64_t files = buffers.param_nvme_file_bytes(4);
  // fp32 with the device AdamW: the update reads the chunks too (the parameters are its master).
  const ZeroBufferLayout::ParamNvmeTraffic traffic = buffers.param_nvme_traffic(4, k.grad_accum, !k.offload_optimizer);
  const std::int64_t reads = traffic.read_bytes;
  ASSERT_GT(files, 0);
  EXPECT_GT(reads, 0);
  EXPECT_EQ(traffic.write_bytes, files);
  EXPECT_EQ(b->memory().nvme_bytes - a->memory().nvme_bytes, files);
  expect_equal_runs(*a, *b, cpu, [&](const StepResult& ra, const StepResult& rb) {
    EXPECT_EQ(ra.times.offload.param_nvme_read_bytes, 0);
    EXPECT_EQ(rb.times.offload.param_nvme_read_bytes, reads);
    EXPECT_EQ(rb.times.offload.param_nvme_write_bytes, files);
    EXPECT_GT(rb.times.offload.param_to_device_s, 0);
  });
  // The chunks on NVMe take swap buffers instead of host memory; those kept in host memory are listed.
  const MemoryReport ma = a->memory(), mb = b->memory();
  EXPECT_EQ(host_component(mb, "offload_swap_buffers") - host_component(ma, "offload_swap_buffers"),
            buffers.param_swap_buffer_bytes(4));
  EXPECT_EQ(host_component(mb, "offload_params"), buffers.param_host_elements * 4);
  if (k.max_in_cpu > 0) EXPECT_GT(buffers.param_host_elements, 0);
  auto c = make_cpu_trainer(nvme, &comm);
  expect_restored_continues(*b, *c, cpu);
}

// The swap files of this process's parameter swappers under dir/zeroplan_rank<r>.
std::vector<std::filesystem::path> param_swap_files(const std::string& dir) {
  std::vector<std::filesystem::path> files;
  const auto rank_dir = std::filesystem::path(dir) / ("zeroplan_rank" + std::to_string(world_comm->rank()));
  for (const auto& e : std::filesystem::directory_iterator(rank_dir))
    if (e.path().filename().string().rfind("param_", 0) == 0) files.push_back(e.path());
  return files;
}

}  // namespace

TEST(ZeroParamNvmeOverMpi, DeviceAdamwEqualsParamCpu) { expect_param_nvme_equals_param_cpu({}, "dev"); }
TEST(ZeroParamNvmeOverMpi, AccumulationAndOneSwapBufferEqualsParamCpu) {
  expect_param_nvme_equals_param_cpu({3, 5000, false, false, 1}, "b1");
}
TEST(ZeroParamNvmeOverMpi, CpuAdamwEqualsParamCpu) { expect_param_nvme_equals_param_cpu({1, 20000, true}, "opt"); }
TEST(ZeroParamNvmeOverMpi, OptimizerOnNvmeTooNothingPersistentEqualsParamCpu) {
  expect_param_nvme_equals_param_cpu({2, 5000, true, true, 2, 0, 0}, "optnvme");
}
TEST(ZeroParamNvmeOverMpi, MaxInCpuKeepsTheFirstChunksEqualsParamCpu) {
  expect_param_nvme_equals_param_cpu({1, 5000, true, false, 3, 12000}, "maxcpu");
}

// Without max_in_cpu, DeepSpeed's default (1e9 elements, kept in pinned host memory by stage3.py
// _create_param_groups_fp16_flat_cpu_memory) holds all of this small model's partition: nothing is read or written
// on disk, and it trains as the partition in host memory does, bit for bit. (MaxInCpuKeepsTheFirstChunksEqualsParamCpu
// covers a max_in_cpu that keeps part of it.)
TEST(ZeroParamNvmeOverMpi, DeepSpeedsDefaultMaxInCpuKeepsASmallPartitionInHostMemory) {
  const std::string dir = nvme_dir("param_default");
  if (dir.empty()) GTEST_SKIP() << "no directory with direct I/O (O_DIRECT) under " << ZEROPLAN_TEST_SCRATCH_DIR;
  Communicator& comm = *world_comm;
  ExecConfig cpu = small_config(3, 1, 5000);
  cpu.zero.param_persistence_threshold = 300;
  cpu.zero.offload_param = true;
  cpu.zero.offload_optimizer = true;
  ExecConfig whole = cpu;
  whole.zero.param_nvme_path = dir;
  ASSERT_EQ(whole.zero.param_max_in_cpu, 1'000'000'000) << "DeepSpeed's default max_in_cpu";
  auto a = make_cpu_trainer(cpu, &comm);
  auto b = make_cpu_trainer(whole, &comm);
  const ZeroPartition partition(b->layout(), comm.world(), comm.rank(), partition_rules(whole.zero));
  const ZeroBufferLayout held = zero_buffer_layout(b->layout(), partition, whole.zero, 1);
  EXPECT_EQ(held.param_nvme_file_bytes(4), 0);
  EXPECT_EQ(held.param_swap_buffers, 0);
  EXPECT_GT(held.param_host_elements, 0);
  expect_equal_runs(*a, *b, cpu, [&](const StepResult&, const StepResult& rb) {
    EXPECT_EQ(rb.times.offload.param_nvme_read_bytes, 0);
    EXPECT_EQ(rb.times.offload.param_nvme_write_bytes, 0);
  });
  EXPECT_EQ(b->memory().nvme_bytes - a->memory().nvme_bytes, 0);
}

TEST(ZeroParamNvmeOverMpi, UnwritablePathIsAnInputErrorNamingIt) {
  ExecConfig c = small_config(3, 1, 20000);
  c.zero.param_persistence_threshold = 300;
  c.zero.offload_param = true;
  // Root writes to a read-only directory: /sys refuses it any new directory (EPERM).
  std::string path = "/sys";
  if (geteuid() != 0) {
    path = std::string(ZEROPLAN_TEST_SCRATCH_DIR) + "/nvme_read_only_world" + std::to_string(world_comm->world());
    std::filesystem::create_directories(path);
    std::filesystem::permissions(path, std::filesystem::perms::owner_read | std::filesystem::perms::owner_exec);
  }
  c.zero.param_nvme_path = path;
  try {
    make_cpu_trainer(c, world_comm);
    ADD_FAILURE() << "an unwritable nvme_path was accepted";
  } catch (const zeroplan::InputError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("zero_optimization.offload_param.nvme_path"), std::string::npos) << what;
    EXPECT_NE(what.find("'" + path + "'"), std::string::npos) << what;
    EXPECT_NE(what.find("not writable"), std::string::npos) << what;
    EXPECT_EQ(what.find('\n'), std::string::npos) << what;
  }
  if (geteuid() != 0) std::filesystem::permissions(path, std::filesystem::perms::owner_all);
}

TEST(ZeroParamNvmeOverMpi, AFileRemovedMidRunIsAnErrorNamingIt) {
  const std::string dir = nvme_dir("param_removed");
  if (dir.empty()) GTEST_SKIP() << "no directory with direct I/O (O_DIRECT) under " << ZEROPLAN_TEST_SCRATCH_DIR;
  Communicator& comm = *world_comm;
  ExecConfig c = small_config(3, 1, 5000);
  c.zero.param_persistence_threshold = 300;  // chunks on NVMe (below it, tensors stay whole and in host memory)
  c.zero.offload_param = true;
  c.zero.param_nvme_path = dir;
  c.zero.param_max_in_cpu = 0;  // every chunk on NVMe (DeepSpeed's default max_in_cpu would keep this model in host memory)
  auto t = make_cpu_trainer(c, &comm);
  TokenSource data = TokenSource::synthetic(vocab(), 5);
  TokenBatch b = next_rank_share(data, c.micro_batch, c.seq_len, c.grad_accum, comm.world(), comm.rank());
  t->step(b.inputs, b.targets);
  const auto files = param_swap_files(dir);
  ASSERT_FALSE(files.empty());
  // Every rank removes all of its own: each fails at the same point, its first read of the step (before any
  // collective, so that no rank waits in one for a rank that failed).
  for (const auto& f : files) std::filesystem::remove(f);
  b = next_rank_share(data, c.micro_batch, c.seq_len, c.grad_accum, comm.world(), comm.rank());
  try {
    t->step(b.inputs, b.targets);
    ADD_FAILURE() << "a step ran on with " << files.size() << " swap files removed";
  } catch (const std::exception& e) {
    const std::string what = e.what();
    const std::string rank_dir = dir + "/zeroplan_rank" + std::to_string(comm.rank()) + "/param_";
    EXPECT_NE(what.find(rank_dir), std::string::npos) << what;
    EXPECT_NE(what.find("removed"), std::string::npos) << what;
    EXPECT_NE(what.find("nvme_io.cpp:"), std::string::npos) << "the check's file:line: " << what;
    EXPECT_EQ(what.find('\n'), std::string::npos) << what;
  }
}

TEST(ZeroParamOffloadOverMpi, Stage3EqualsNoOffload) { expect_param_offload_equals_no_offload(1, 20000, false, 5); }
TEST(ZeroParamOffloadOverMpi, WithAccumulationAndOneStagingBuffer) {
  expect_param_offload_equals_no_offload(3, 5000, false, 1);
}
TEST(ZeroParamOffloadOverMpi, WithOptimizerOffloadEqualsNoOffload) {
  expect_param_offload_equals_no_offload(1, 20000, true, 5);
}
TEST(ZeroParamOffloadOverMpi, WithOptimizerOffloadAccumulationAndTwoStagingBuffers) {
  expect_param_offload_equals_no_offload(2, 5000, true, 2);
}
TEST(ZeroParamOffloadOverMpi, NothingPersistentOneStagingBuffer) {
  expect_param_offload_equals_no_offload(2, 5000, true, 1, 0);
}

TEST(ZeroParamOffloadOverMpi, RefusedBelowStage3AndWithTooSmallBuffers) {
  ExecConfig c = small_config(2, 1, 20000);
  c.zero.offload_param = true;
  EXPECT_THROW(make_cpu_trainer(c, world_comm), std::invalid_argument);
  c.zero.stage = 3;
  c.zero.param_buffer_elements = 16;  // smaller than the largest chunk
  try {
    make_cpu_trainer(c, world_comm);
    ADD_FAILURE() << "a staging buffer smaller than a chunk was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("offload_param.buffer_size"), std::string::npos) << e.what();
  }
}

TEST(ZeroOffloadOverMpi, StageZeroIsRefused) {
  ExecConfig c = small_config(0, 1, 20000);
  c.zero.offload_optimizer = true;
  EXPECT_THROW(make_cpu_trainer(c, world_comm), std::invalid_argument);
}

