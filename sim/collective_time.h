// Collective time: t = alpha + S * factor(n) / B_eff(S) (nccl-tests doc/PERFORMANCE.md; zero-formulas.md
// section 5), S the full buffer in bytes, factor(n) the ring factor (all-reduce 2(n-1)/n, all-gather and
// reduce-scatter (n-1)/n), alpha the link's per-call latency, B_eff(S) the bus bandwidth at that size.
//
// B_eff(S): where the cluster carries measured busbw points for the collective, B_eff is interpolated between
// them linearly in log(S). A measured busbw already includes the latency (nccl-tests' time is the whole call),
// so each point is first turned into the bandwidth of the bandwidth term alone,
//   B_eff_i = S_i * factor / (S_i * factor / busbw_i - alpha),
// which makes the formula reproduce the measured time exactly at every measured size. Where the link's alpha
// is not below every measured call of a group (alpha grows with the group size; one alpha per link does not fit
// both 2 and 4 GPUs), that group's alpha is derived from its own points: t(smallest S) - S * factor /
// busbw(largest S) (half the shortest call if that is not below every call). Below the smallest
// measured size B_eff stays at the smallest point's (the time tends to alpha), above the largest at the
// largest point's. Without measured points, B_eff is the link's asymptotic bus_bandwidth.
// Measured points are taken for the group size n when the cluster has them, else from the nearest measured
// group size (a ring's busbw depends little on n; nccl-tests' busbw is defined to make it so).
//
// Hierarchical when a group spans nodes (n = g GPUs per node x m nodes), as NCCL's tree/ring hierarchy and
// the usual two-level algorithms do it:
//   all-reduce     = intra-node reduce-scatter (S, g) + inter-node all-reduce (S/g, m) + intra-node all-gather (S, g)
//   reduce-scatter = intra-node reduce-scatter (S, g) + inter-node reduce-scatter (S/g, m)
//   all-gather     = inter-node all-gather (S/g, m) + intra-node all-gather (S, g)
// The inter-node stage runs on the g GPUs of each node in parallel, each with its S/g slice, and all of them
// share the node's network: inter_node.bus_bandwidth (and its measured points) is the node's aggregate busbw
// over all its NICs (nccl-tests' busbw convention, zero-formulas.md sec. 5, of the node-level collective), so
// each GPU's slice moves at bus_bandwidth / g and the stage takes (S/g) * factor(m) / (B/g) = S * factor(m) / B:
// the whole buffer crosses the node's network once, however many GPUs the node has.
#pragma once

#include <array>
#include <vector>

#include "core/cluster_description.h"
#include "core/units.h"

namespace zeroplan {

// The bandwidth curve of one collective on one link class for one group size.
class BandwidthCurve {
 public:
  BandwidthCurve() = default;
  // points: (message bytes, busbw bytes/s); asymptote used when points is empty.
  BandwidthCurve(const std::vector<CollectiveBandwidthPoint>& points, double factor, double latency_seconds,
                 double asymptotic_bus_bandwidth);
  // Seconds for a full buffer of `bytes` (factor and alpha included).
  double seconds(double bytes) const;
  bool measured() const { return !log_bytes_.empty(); }

 private:
  double factor_ = 0.0;
  double latency_ = 0.0;
  double asymptote_ = 0.0;
  std::vector<double> log_bytes_;   // sorted
  std::vector<double> bandwidth_;   // B_eff at each point (bandwidth term only)
};

// Times of the three collectives for groups of one cluster. Built once per (cluster, group size); every call
// after that is a few multiplications, a log and a short search.
class CollectiveTimer {
 public:
  // Throws InputError when the cluster cannot time a collective among `ranks` GPUs (ranks < 1, no bandwidth
  // for a link the group needs).
  CollectiveTimer(const ClusterDescription& cluster, int ranks);

  int ranks() const { return ranks_; }
  bool spans_nodes() const { return nodes_ > 1; }
  // Seconds for one call with a full buffer of `bytes` (nccl-tests' S). 0 for one rank or zero bytes.
  double seconds(CollectiveKind kind, Bytes bytes) const;
  // The same call while compute kernels run on the group's GPUs: its intra-node stages at the link's
  // bandwidth_fraction_beside_compute (core/cluster_description.h); the network stage is not slowed.
  double seconds_beside_compute(CollectiveKind kind, Bytes bytes) const;
  // What each call beyond the first adds inside one NCCL group of calls: the links' grouped_call_seconds
  // (core/cluster_description.h), the slower link's across nodes. 0 for one rank.
  double grouped_call_seconds() const { return grouped_call_; }
  // One NCCL group of `calls` calls of `kind` moving `bytes` in all beside compute: one call of all the bytes and
  // each further call's grouped cost.
  double grouped_seconds_beside_compute(CollectiveKind kind, Bytes bytes, std::int64_t calls) const;

 private:
  double timed(CollectiveKind kind, Bytes bytes, double intra_fraction) const;
  int ranks_ = 1;
  int gpus_per_node_ = 1;  // g: ranks of the group in one node
  int nodes_ = 1;          // m
  double intra_fraction_beside_compute_ = 1.0;
  double grouped_call_ = 0.0;
  std::array<BandwidthCurve, 3> intra_;  // by CollectiveKind, group g
  std::array<BandwidthCurve, 3> inter_;  // by CollectiveKind, group m
};

// nccl-tests' definitions: algbw = S / t; busbw = algbw * factor(n).
double algorithm_bandwidth(Bytes bytes, double seconds);
double bus_bandwidth(CollectiveKind kind, int ranks, Bytes bytes, double seconds);
// Ring factor on the full buffer: all-reduce 2(n-1)/n, all-gather and reduce-scatter (n-1)/n.
double collective_factor(CollectiveKind kind, int ranks);

}  // namespace zeroplan
