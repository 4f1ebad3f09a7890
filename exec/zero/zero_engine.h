// The ZeRO engine: one rank's model states and the gradient/parameter synchronization of stages 0-3,
// written once for every backend (exec/zero/zero_device.h) and communicator (exec/comm/communicator.h).
//
// DeepSpeed semantics (deepspeed/runtime/engine.py, zero/stage_1_and_2.py), with our partitioning
// (zero_partition.h):
//   stage 0  every rank holds all params, grads, master params and AdamW moments; at the gradient-accumulation
//            boundary each gradient bucket is all-reduced as soon as backward has finished it.
//   stage 1  fp32 master params and moments are partitioned (rank r keeps chunk r of every bucket); gradients
//            stay whole and accumulate over micro-steps; at the boundary each bucket is reduce-scattered (in
//            place) as backward finishes it; each rank updates its chunks; the 16-bit params are all-gathered.
//   stage 2  gradients are partitioned too: every micro-step's backward writes into a few bucket buffers and
//            each finished bucket is reduce-scattered into the rank's gradient partition (accumulated over
//            micro-steps), the bucket buffer then reused (DeepSpeed's ipg buckets with overlap_comm).
//   stage 3  parameters are partitioned too (DeepSpeed zero/stage3.py): the rank keeps its chunk of every
//            bucket of 16-bit params, or, with the fp32 master on the device, only the master's chunk, cast into
//            its own slot before each all-gather (zero_buffer_layout.h stage3_gathers_cast_master); before each
//            unit (embeddings, a block, the final norm) computes, its buckets are all-gathered into a
//            gathered-parameter arena, the next units prefetched on the comm lane, and released after use unless
//            reused soon (core/zero3_fetch_plan.h: the same plan the planner reads); tensors below
//            stage3_param_persistence_threshold stay whole on every rank and are all-gathered once after the
//            optimizer step. Gradients as at stage 2. Each rank initializes only its partition (DeepSpeed's
//            zero.Init): no rank ever holds the whole model.
// At every stage the global gradient norm (and with it the fp16 overflow decision and the clipping factor) is
// computed from the reduced gradients and agreed on by all ranks before any parameter changes.
//
// ZeRO-Offload (offload_optimizer, stages 1-3; DeepSpeed zero/stage_1_and_2.py cpu_offload and zero/stage3.py
// offload_optimizer): the rank's fp32 master partition and AdamW moments live in host memory (pinned). At the
// accumulation boundary each bucket's reduced gradient chunk is copied to the host on the to_host lane as soon
// as its reduction is issued (while backward goes on, as DeepSpeed's async_accumulate_grad_in_cpu_via_gpu /
// partition_grads copy each reduced bucket); once the norm is agreed, the host updates the partition piece by
// piece with the CPU AdamW (exec/offload/cpu_adamw.h: writes the 16-bit copy too) as each piece has arrived,
// and copies each updated piece to the device on the to_device lane while it updates the next; then the usual
// parameter all-gather. DeepSpeed copies the whole updated fp16 partition back after the CPU step
// (stage_1_and_2.py step: _optimizer_step then the copy of single_partition_of_fp32_groups into the bit16
// partition); here piece k's copy overlaps piece k+1's update. At stages 1-2 with the states in host memory the
// update is deferred into the next forward, in the order it needs the parameters: finish_step settles the norm,
// the overflow decision and the clipping factor (they need every gradient), and params_needed(lo, hi) then
// updates every bucket beginning below hi, bottom up, all-gathering each as soon as its pieces are on the device,
// while the GPU runs the forward of the buckets below. The arithmetic is the same, piece for piece; only the time
// moves: on 2x H200 the CPU AdamW (~250 ms) had followed a backward pass (~115 ms) and a forward (~47 ms) that
// now runs beside it. The update of a run's last step is done when the states are read (gathered_params,
// read_owned_state) or replaced (set_params, restore_state).
//
// ZeRO-Infinity parameter offload (offload_param cpu, stage 3; DeepSpeed zero/stage3.py with
// partition_parameters.py's remote_device cpu): the rank's 16-bit parameter partition lives in host memory
// (pinned with pin_memory). Every all-gather the fetch plan issues (params_needed: the unit in use and the
// prefetched ones; the persistent tensors after the step) first copies each of its chunks host-to-device on the
// to_device lane into one of a few staging buffers (offload_param buffer_count x buffer_size bound them), then
// all-gathers from there; a buffer is reused once the all-gather that read it is done. DeepSpeed copies each
// ds_tensor to the GPU in its all-gather (partition_parameters.py _all_gather: ds_tensor.to(device)) into the
// caching allocator; here the staging buffers are fixed. After the optimizer: with offload_optimizer too, the
// CPU AdamW writes the 16-bit partition (fp32 training: the master is the partition) straight into host memory,
// no copy at all; with the device AdamW, each bucket's update is written into a staging buffer and copied
// device-to-host (stage3.py _reassign_or_swap_out_partitioned_parameters: the fp32 partition copied into the
// offloaded 16-bit one). Persistent tensors stay whole on the device.
//
// ZeRO-Infinity parameter offload to NVMe (offload_param nvme, stage 3; DeepSpeed zero/stage3.py with
// swap_tensor/partitioned_param_swapper.py): as offload_param cpu, but the partition's chunks live in files under
// nvme_path (exec/offload/param_swapper.h) and only a few pinned swap buffers are in host memory (persistent
// tensors' chunks and offload_param.max_in_cpu elements stay in host memory, zero_buffer_layout.h). Each micro-step's
// schedule (start_schedule) hands the swapper the chunks its all-gathers will read, in order, and the swapper reads
// them ahead into free buffers while the device computes; each gather copies a chunk from its swap buffer into a
// staging buffer as with cpu. The update writes every chunk back: the CPU AdamW's pieces of a bucket land in one
// swap buffer, written when the bucket's last piece is done; the device AdamW's chunk is copied device-to-host
// into one (in fp32 training the chunk, which is the master, is read first). The step ends with every write on
// disk, so the next step's reads see it.
//
// ZeRO-Infinity optimizer offload (offload_optimizer nvme, stages 1-3; DeepSpeed zero/stage3.py with
// swap_tensor/pipelined_optimizer_swapper.py): as ZeRO-Offload, but the fp32 master partition and the moments
// live in files under nvme_path; the pieces are swapped into a few host buffers (exec/offload/optimizer_swapper.h),
// updated by the same CPU AdamW and written back, the next pieces read and the previous one written while a piece
// is updated. The updated parameters go to the device through the host copy of the partition (in fp32 training
// too: the swap buffer is reused before the copy would have finished).
//
// Gradient precisions (data_types.grad_accum_dtype and communication_data_type fp32 with a 16-bit model,
// ZeroSettings): backward always writes the model precision. With fp32 accumulation the gradients (grads_: whole
// at stages 0-1, the partition from stage 2) are fp32: at stages 0-1 backward writes each micro-step into
// micro_grads_ and each finished bucket is added into grads_ (DeepSpeed's BF16_Optimizer adds .grad into its fp32
// buffer the same way); from stage 2 each reduced chunk is added into the fp32 partition. A reduction in another
// precision than the buffer it reduces converts into a copy first and back after (allreduce_bucket's
// tensor.to(communication_data_type)); AdamW and the norm read the fp32 gradients.
//
// Better than DeepSpeed here: no fp32 copy of the gradients (AdamW reads the 16-bit reduced gradients and
// unscales/clips them in registers), reduce-scatter straight into the partition (no copy into a separate
// partition buffer), one collective per bucket (not one reduce per owning rank).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/zero3_fetch_plan.h"
#include "exec/comm/communicator.h"
#include "exec/exec_config.h"
#include "exec/offload/cpu_adamw.h"
#include "exec/offload/optimizer_swapper.h"
#include "exec/offload/param_swapper.h"
#include "exec/param_layout.h"
#include "exec/zero/zero_device.h"
#include "exec/zero/zero_buffer_layout.h"
#include "exec/zero/zero_partition.h"

namespace zeroplan::exec {

// Seconds of one step spent in communication, measured on the communication lane, and the part of it the
// compute lane waited for (exposed communication).
struct CommTimes {
  double seconds[kCommKinds] = {0, 0, 0};
  double exposed_s = 0;
};

// One interval (or, with seconds 0, one instant) of a measured step on one lane, in seconds from the step's first
// mark on the compute lane (ZeroEngine::begin_step): what `zeroplan run --trace` lays beside the plan's timeline.
struct MeasuredSpan {
  std::string lane;  // "collectives", "compute waits", "compute", "D2H", "H2D"
  std::string name;  // "all_gather", "wait for the comm lane", "unit 12", ...
  double start_s = 0;
  double seconds = 0;
};

// Seconds of one step's ZeRO-Offload pipeline, summed over its pieces: gradient copies to the host (to_host
// lane), the CPU AdamW (host clock), parameter copies to the device (to_device lane).
struct OffloadTimes {
  double to_host_s = 0;
  double cpu_adamw_s = 0;
  double to_device_s = 0;
  int pieces = 0;
  // offload_param: parameter chunks copied host-to-device before their all-gathers (to_device lane), and the
  // device AdamW's updated chunks copied device-to-host (to_host lane; none with offload_optimizer).
  double param_to_device_s = 0;
  double param_to_host_s = 0;
  // offload_optimizer nvme: the states swapped in and out this step, and the time the host waited for them.
  std::int64_t nvme_read_bytes = 0;
  std::int64_t nvme_write_bytes = 0;
  double nvme_wait_s = 0;
  // offload_param nvme: the parameter chunks read for this step's all-gathers and written back after its update
  // (whole 4096-byte blocks), and the time the host waited for them.
  std::int64_t param_nvme_read_bytes = 0;
  std::int64_t param_nvme_write_bytes = 0;
  double param_nvme_wait_s = 0;
};

// Whether the engine's parameters are trained, or frozen (torch's requires_grad=False: LoRA's base). A frozen
// engine holds the parameters as the stage holds parameters, and nothing else: no gradients, no bucket buffers,
// no master copy, no AdamW moments, no optimizer step. DeepSpeed 0.19.8 does the same with frozen parameters:
// stages 1-2 flatten and partition only the parameter groups the optimizer holds, requires_grad ones
// (zero/stage_1_and_2.py DeepSpeedZeroOptimizer.__init__ builds bit16_groups from params with requires_grad), so a
// frozen parameter stays whole on every rank as a plain module parameter; stage 3 partitions every parameter of the
// module whatever its requires_grad (zero/partition_parameters.py Init._convert_to_zero_parameters) and gathers
// it for each forward and backward use (parameter_offload.py's pre-forward / pre-backward hooks fetch every
// ds_param of the module), while its optimizer holds the trainable ones only (stage3.py
// _get_trainable_parameter_groups). So: whole at stages 0-2, partitioned and gathered unit by unit at stage 3.
enum class Trainability { trainable, frozen };

// Where stages 2-3 keep the rank's reduced gradient partition: an allocation of the engine's own, or memory the
// trainer lends it (set_gradient_partition) over activations the backward has finished with
// (exec/activation_accounting.h mlp_saved_layout says where, and when it may).
enum class GradientPartitionHome { engine, trainer };

class ZeroEngine {
 public:
  ZeroEngine(const ExecConfig& config, const ParamLayout& layout, ZeroDevice& device, Communicator& comm,
             Trainability trainability = Trainability::trainable,
             GradientPartitionHome gradient_home = GradientPartitionHome::engine);
  // GradientPartitionHome::trainer: the partition's partition_elements() elements (16-byte aligned), lent before
  // the first micro-step. Every element is written by a reduce-scatter before the step reads it, so it starts as
  // whatever the memory held.
  void set_gradient_partition(void* partition);
  bool frozen() const { return frozen_; }

  const ZeroPartition& partition() const { return partition_; }
  int stage() const { return config_.zero.stage; }

  // Where the model reads the parameter at flat element `offset` (element type of the device). At stage 3 only
  // between params_needed() for its unit and that unit's release.
  void* param_at(std::int64_t offset) const;
  // Pointer to the gradient of the flat element `offset` for the current micro-step (a bucket buffer at stage 2).
  void* grad_at(std::int64_t offset) const;
  // Whether backward kernels accumulate into the gradients (later micro-steps at stages 0-1) or overwrite them.
  bool kernels_accumulate() const { return accumulate_in_kernels_; }

  // The micro-step protocol, called by the backend in this order:
  void begin_step();                          // waits for the previous step's parameter all-gathers
  void begin_micro_step(std::int64_t micro);  // micro in [0, grad_accum)
  // A forward without backward (evaluation): the stage-3 schedule of a forward alone. Then params_needed().
  void begin_forward_only();
  // Before the compute lane reads the parameters of the unit [lo, hi) (gather_unit_ranges, in the order the
  // model uses them: forward embeddings, blocks, final norm, embeddings (logits); backward embeddings
  // (logits), final norm, blocks top down). Stage 3 gathers (or finds prefetched) the unit and prefetches the
  // next ones. Stages 1-2 with the optimizer on the CPU run the previous step's deferred update of the buckets
  // below hi not yet updated; otherwise a no-op at stages 0-2.
  void params_needed(std::int64_t lo, std::int64_t hi);
  // Before backward writes any gradient in [lo, hi): makes sure its buckets have buffers.
  void prepare_gradients(std::int64_t lo, std::int64_t hi);
  // After backward has finished every gradient at flat index >= lo for this micro-step.
  void gradients_final_from(std::int64_t lo);
  // After the last micro-step: reduced gradients, norm, overflow, clip, AdamW, parameter sync. `loss_scale` is
  // the scale the gradients carry. Returns the global gradient norm of the unscaled gradients (inf/nan on
  // overflow). `skip` decides from the norm whether to skip (the loss scaler); it runs on every rank with the
  // same value.
  double finish_step(double loss_scale, const std::function<bool(double)>& skip);

  // CUDA graphs of a micro-step (exec/cuda/step_graphs.cuh). The backend captures micro-step `micro` once and
  // replays it from then on: join_lanes() before the capture and before every launch (the compute lane waits for
  // every lane, so that the graph needs no wait for earlier work); begin_graph_capture() before the micro-step's
  // first engine call and end_graph_capture() after its last, inside the capture (every lane the capture used joins
  // the compute lane again, as a capture must end); after each launch, replay_graph_bookkeeping() runs the
  // micro-step's engine calls again with the device and communicator in GraphMode::replayed, so that the host's
  // state (buckets reduced, stage 3's schedule, time marks, collective counters and ordinals) advances as the
  // graph's work did. A micro-step qualifies where the engine does no host work inside it
  // (exec/network_plan.h network_step_replays_cuda_graph).
  void join_lanes();
  // After a graph's launch: every lane waits for the compute lane, so that eager work after it, on any lane, follows
  // the graph (whose events, recorded inside it, eager work cannot wait for). replay_graph_bookkeeping does it first.
  void follow_graph();
  void begin_graph_capture(std::int64_t micro);
  void end_graph_capture();
  void abandon_graph_capture();  // a capture failed: eager again (the micro-step's state is lost; the caller stops)
  void replay_graph_bookkeeping(std::int64_t micro);

  // Sum of a host value over ranks (losses), deterministic.
  double sum_over_ranks(double value);
  // Several host values summed over ranks in one reduction (a layer list's loss and correct count: each host
  // reduction is a copy up, an all-reduce, a copy down and a wait, after the step's last kernel).
  void sum_over_ranks(double* values, int count);

  // Whole parameters as floats (tests; stage 3 gathers them unit by unit) and setting them (also the master).
  std::vector<float> gathered_params();
  void set_params(const std::vector<float>& flat);
  // The rank's reduced gradients of the last step, gathered whole and unscaled (tests).
  std::vector<float> gathered_grads(double loss_scale);

  const CommTimes& last_comm_times() const { return times_; }
  const OffloadTimes& last_offload_times() const { return offload_times_; }
  // The last step's timeline (ExecConfig::record_timeline; empty otherwise).
  const std::vector<MeasuredSpan>& last_timeline() const { return timeline_; }
  bool offloads_optimizer() const { return offload_; }
  bool offloads_params() const { return offload_param_; }
  // offload_optimizer nvme and offload_param nvme: the swap files' bytes (0 without).
  std::int64_t nvme_bytes() const {
    return (swapper_ ? swapper_->nvme_bytes() : 0) + (param_swapper_ ? param_swapper_->nvme_bytes() : 0);
  }

  // Checkpoints. Every rank owns chunk `rank` of every bucket (at every stage, so that the ranks write
  // disjoint pieces in parallel): its (flat begin, elements) ranges, bucket after bucket.
  std::vector<std::pair<std::int64_t, std::int64_t>> owned_ranges() const;
  // fp32 master parameters (the parameters in fp32 training) and AdamW moments over owned_ranges(),
  // concatenated. The 16-bit parameters are not part of it: AdamW writes them as the rounding of the master
  // (exec/cuda/adamw.cu), so restore_state() rebuilds them bit for bit.
  void read_owned_state(std::vector<float>& master, std::vector<float>& m, std::vector<float>& v);
  // Fills `n` values of the flat range starting at `flat_begin` into each non-null destination.
  using StateSource = std::function<void(std::int64_t flat_begin, std::int64_t n, float* master, float* m, float* v)>;
  // Sets every state this rank holds (whole or partitioned as the stage keeps it) from `source`, and the
  // optimizer's step count (AdamW bias correction).
  void restore_state(const StateSource& source, int optimizer_step);
  int optimizer_step() const { return optimizer_step_; }

 private:
  struct Slot {
    void* buffer = nullptr;
    int owner = -1;  // bucket using it in this micro-step
  };
  // A bucket finished in this micro-step: its micro-step gradients into the accumulated ones (where separate).
  void gather_micro_step_gradients(int b);
  CommKind reduction_kind() const;  // all-reduce at stage 0 (or without reduce_scatter), else reduce-scatter
  // The reduction of buckets finished together: one NCCL group where each has buffers of its own, else one by one.
  void reduce_buckets(const std::vector<int>& bs);
  void reduce_bucket(int b);
  void end_reduction(CommKind kind, int begin_mark);  // its time on the comm lane; overlap_comm false: compute waits
  void* bucket_grads(int b) const;  // where backward writes bucket b in this micro-step
  // Stages 1-2: one group's all-gather (buckets [first, last), gather_groups_) on the comm lane after the compute
  // lane's work so far.
  void all_gather_group(std::size_t first, std::size_t last, Lane after = Lane::compute);
  void collect_comm_times();
  void collect_timeline();
  bool stage3() const { return config_.zero.stage == 3; }
  // Stage 3: the fetch plan's gathers and releases.
  void setup_stage3();
  void gather_unit(int unit, std::int64_t arena_offset);
  void record_pending_releases();
  void start_schedule(const Zero3FetchPlan* plan);
  void all_gather_persistent();
  // All-gathers buckets `ks` (their partition chunks) into dst(k) on the comm lane, in groups of at most
  // `group_elements` (and, with offload_param, of at most as many chunks as staging buffers, each staged
  // host-to-device first).
  void gather_buckets(const std::vector<int>& ks, const std::function<void*(int)>& dst, std::int64_t group_elements);
  // offload_param: n values (fp32) into the host partition at `part` as the element type, through a staging
  // buffer (the device's rounding, so that it equals the parameters a device partition would hold); master (on
  // the device, or null) gets the values too.
  void write_host_params(std::int64_t part, const float* values, std::int64_t n, float* master);
  // offload_param: where bucket k's chunk is in host memory (offload_param cpu, or a chunk nvme keeps there), or
  // null for a chunk on NVMe.
  void* host_chunk(int k) const;
  // offload_param: bucket k's chunk from host memory (or, on NVMe, from its swap buffer, read ahead by the plan and
  // released once the copy is done) into staging buffer s on the to_device lane, once the last user of that buffer
  // is done with it (its staging event).
  void stage_param_chunk(int k, int s);
  // offload_param nvme: the swapper and its event ids; n values of bucket k's chunk from element `offset` copied
  // from host memory `src` (already rounded to the element type) to its file; the chunk read into `out`.
  void setup_param_swap();
  void write_param_chunk(int k, std::int64_t offset, const void* src, std::int64_t n);
  void read_param_chunk(int k, void* out);
  void plan_param_reads(const Zero3FetchPlan* plan);
  void* nvme_update_target(std::size_t piece);  // the CPU AdamW's 16-bit output for a piece of a chunk on NVMe
  void finish_param_swap();                      // every write on disk
  int bucket_of_partition_offset(std::int64_t part) const;
  bool buckets_on_nvme(int k) const;  // offload_param nvme: bucket k's chunk lives in a swap file
  // offload_param without offload_optimizer: the device AdamW into staging buffers, copied to the host.
  void update_offloaded_params(const std::function<void(const AdamwRange&)>& update);
  // ZeRO-Offload.
  void setup_offload();
  void copy_gradients_to_host(int bucket);
  offload::AdamwHyper offload_hyper(float grad_scale) const;
  void offloaded_update(float grad_scale);
  void collect_offload_times();
  // ZeRO-Offload at stages 1-2 with the states in host memory: the update deferred into the next forward.
  bool defers_update() const { return offload_ && !swapper_ && config_.zero.stage < 3; }
  void update_buckets_below(std::int64_t hi);  // the deferred update of every bucket beginning below hi
  void complete_deferred_update();

  // The engine calls of a captured micro-step, in order (replay_graph_bookkeeping runs them again).
  struct GraphCall {
    enum Kind { params_needed, prepare_gradients, gradients_final_from } kind;
    std::int64_t lo, hi;
  };
  void log_graph_call(GraphCall::Kind kind, std::int64_t lo, std::int64_t hi) {
    if (graph_logging_) graph_calls_[static_cast<std::size_t>(micro_)].push_back(GraphCall{kind, lo, hi});
  }
  void set_graph_mode(GraphMode mode);

  ExecConfig config_;
  bool frozen_ = false;  // Trainability::frozen: parameters only
  const ParamLayout& layout_;
  ZeroDevice& device_;
  Communicator& comm_;
  ZeroPartition partition_;
  ZeroBufferLayout buffers_;  // gradient bucket buffers, stage-3 units and fetch plans
  CommDtype type_;       // parameters and what backward writes (the model precision)
  CommDtype grad_type_;  // the accumulated and reduced gradients (grads_): fp32 with fp32_grad_accumulation
  CommDtype comm_type_;  // gradient reductions: fp32 with fp32_communication
  int rank_, world_;
  // Stages 1-2: [first, last) bucket ranges of one all-gather group each (allgather_bucket_size elements of
  // buckets, at least one), fixed with the partition.
  std::vector<std::pair<std::size_t, std::size_t>> gather_groups_;

  void* params_ = nullptr;           // whole 16-bit (or fp32) parameters; stage 3: the rank's partition (none
                                     //   where gathers_cast_master_)
  bool gathers_cast_master_ = false;  // stage 3: the all-gathers cast the fp32 master (stage3_gathers_cast_master)
  // Where the rank's 16-bit partition holds partition element `offset`: null where there is none.
  void* partition_params(std::int64_t offset) const {
    return params_ ? static_cast<char*>(params_) + offset * comm_dtype_bytes(type_) : nullptr;
  }
  void* grads_ = nullptr;            // stages 0-1: whole gradients; stage 2: the rank's gradient partition
  bool grads_lent_ = false;          // GradientPartitionHome::trainer: grads_ is the trainer's
  // Stages 0-1 on backends whose kernels always accumulate (the CPU reference): micro-steps after the first
  // write here and are added to grads_ bucket by bucket, so the step's gradient is the sum of per-micro-step
  // gradients, summed in the order the ranks' gradients are (and DeepSpeed's accumulation order).
  void* micro_grads_ = nullptr;
  // Stages 0-1 with fp32_grad_accumulation: backward writes every micro-step here (model precision), added into
  // the fp32 grads_ bucket by bucket.
  bool micro_step_gradients_ = false;
  void* reduce_scratch_ = nullptr;   // stages 2-3: one chunk (communication precision), buffers_.accumulation_scratch
  void* comm_copy_ = nullptr;        // fp32_communication: a bucket in fp32 (buffers_.communication_copy)
  float* master_ = nullptr;          // fp32 master: whole (stage 0) or partition; null in fp32 training
  float *m_ = nullptr, *v_ = nullptr;
  std::vector<Slot> slots_;          // stages 2-3 bucket buffers (buffers_.slot_elements)
  std::vector<bool> reduced_;        // this micro-step: bucket finished (accumulated, reduction issued)
  std::int64_t micro_ = 0;
  bool graph_logging_ = false;
  std::vector<std::vector<GraphCall>> graph_calls_;  // per micro-step index
  bool boundary_ = false;
  bool accumulate_in_kernels_ = false;
  int optimizer_step_ = 0;
  // timing marks of this step: (kind, begin mark, end mark) on the comm lane; exposed waits on compute
  std::vector<std::tuple<int, int, int>> comm_marks_;
  std::vector<std::pair<int, int>> wait_marks_;
  CommTimes times_;
  // ExecConfig::record_timeline: the step's first mark, where each stage-3 unit's compute began (unit, mark).
  int step_mark_ = -1;
  std::vector<std::pair<int, int>> unit_marks_;
  std::vector<MeasuredSpan> timeline_;

  // Stage 3
  struct FreedRange {
    std::int64_t lo, hi;  // arena elements
    int event;            // recorded on the compute lane when the unit's last reader was enqueued
  };
  void* persistent_ = nullptr;  // persistent tensors, whole
  void* arena_ = nullptr;       // gathered parameters
  const Zero3FetchPlan* plan_ = nullptr;
  std::size_t cursor_ = 0;
  std::vector<std::int64_t> unit_region_;                      // arena offset of a resident unit, or -1
  std::vector<int> pending_releases_;                          // released after the previous use
  std::vector<FreedRange> freed_;
  int gather_event_base_ = 0, release_event_base_ = 0;

  // ZeRO-Offload: the partition in host memory (indexed like the device partition: partition_offset).
  struct Piece {
    int bucket;
    std::int64_t part;   // offset in the partition (host arrays)
    std::int64_t flat;   // flat index of element 0 (weight decay)
    std::int64_t grad;   // element offset of its reduced gradient in grads_
    std::int64_t param;  // element offset of its parameters in params_
    std::int64_t n;
  };
  void update_piece(std::size_t i, const offload::AdamwHyper& hyper, float* master, float* m, float* v);
  // Piece i's arrays for the CPU AdamW (`updated`: where its 16-bit copy goes, or the master itself).
  offload::AdamwTensors piece_tensors(std::size_t i, float* master, float* m, float* v, void* updated) const;
  // Stage 3 with the states in host memory: the pieces a batch at a time (exec_config.h offload_update_batches).
  void update_in_batches(const offload::AdamwHyper& hyper);
  // Runs `visit` on every piece's states (in host memory or swapped in from NVMe), in piece order.
  void for_each_offloaded_piece(offload::SwapAccess access,
                                const std::function<void(const Piece&, float* master, float* m, float* v)>& visit);
  bool offload_ = false;
  float* host_master_ = nullptr;  // fp32 master (the parameters themselves in fp32 training); null with nvme
  float *host_m_ = nullptr, *host_v_ = nullptr;
  std::unique_ptr<offload::OptimizerSwapper> swapper_;  // offload_optimizer nvme: the states' files
  void* host_grads_ = nullptr;    // reduced gradient partition (element type)
  void* host_half_ = nullptr;     // 16-bit copy of the updated master, copied to the device (fp32 too with nvme)
  std::unique_ptr<offload::CpuAdamw> cpu_adamw_;
  offload::DecayGeometry decay_;
  std::vector<Piece> pieces_;
  std::vector<std::vector<int>> bucket_pieces_;
  int piece_event_base_ = 0;
  std::vector<std::pair<int, int>> to_host_marks_, to_device_marks_;
  double cpu_adamw_s_ = 0;
  // defers_update(): the step's CPU AdamW left for the next forward (params_needed), bucket by bucket from the
  // bottom of the layout, the order the forward needs them.
  struct DeferredUpdate {
    bool pending = false;
    offload::AdamwHyper hyper;
    std::size_t done = 0;  // buckets updated, counted from the last (the embeddings')
  };
  DeferredUpdate deferred_;
  offload::SwapTimes swap_times_;  // this step's swapping (offload_optimizer nvme)
  OffloadTimes offload_times_;

  // offload_param: params_ is host memory (the fp32 host master itself in fp32 training with offload_optimizer).
  bool offload_param_ = false;
  std::vector<void*> staging_;       // buffers_.param_staging_buffers device buffers
  std::size_t next_staging_ = 0;     // round robin
  int staging_event_base_ = 0;       // one "free again" event per staging buffer, then one "host copies done"
  std::vector<std::pair<int, int>> param_h2d_marks_, param_d2h_marks_;
  // offload_param nvme: the chunk files; per bucket its chunk index in the swapper (the bucket's own) or -1.
  bool param_nvme_ = false;
  std::unique_ptr<offload::ParamSwapper> param_swapper_;
  int swap_event_base_ = 0;             // one "its device copy is done" event per swap buffer
  offload::ParamSwapper::Writing writing_;  // the CPU AdamW's chunk being filled piece by piece
};

}  // namespace zeroplan::exec
