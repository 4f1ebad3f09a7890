#include "sim/collective_time.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <string>
#include <utility>

#include "core/input_error.h"

namespace zeroplan {

double collective_factor(CollectiveKind kind, int ranks) {
  if (ranks <= 1) return 0.0;
  const double n = ranks;
  // nccl-tests doc/PERFORMANCE.md: all-reduce moves 2(n-1)/n of the buffer per rank, the others (n-1)/n.
  return kind == CollectiveKind::all_reduce ? 2.0 * (n - 1.0) / n : (n - 1.0) / n;
}

double algorithm_bandwidth(Bytes bytes, double seconds) {
  return seconds > 0.0 ? static_cast<double>(bytes) / seconds : std::numeric_limits<double>::infinity();
}

double bus_bandwidth(CollectiveKind kind, int ranks, Bytes bytes, double seconds) {
  return algorithm_bandwidth(bytes, seconds) * collective_factor(kind, ranks);
}

BandwidthCurve::BandwidthCurve(const std::vector<CollectiveBandwidthPoint>& points, double factor,
                               double latency_seconds, double asymptotic_bus_bandwidth)
    : factor_(factor), latency_(latency_seconds), asymptote_(asymptotic_bus_bandwidth) {
  // (log S, measured call seconds), sorted by size.
  std::vector<std::pair<double, double>> measured;
  measured.reserve(points.size());
  double largest_busbw = 0.0;
  for (const CollectiveBandwidthPoint& point : points) {
    const double bytes = static_cast<double>(point.message_bytes);
    measured.emplace_back(std::log(bytes), bytes * factor / point.bus_bandwidth);
    largest_busbw = std::max(largest_busbw, point.bus_bandwidth);
  }
  std::sort(measured.begin(), measured.end());
  if (!measured.empty()) {
    // The link's alpha holds when it is below every measured call. Latency grows with the group, so one alpha
    // for the link can exceed a small group's measured call (the 2-GPU all-reduce at 1 MiB on our H200s takes
    // 14 us, the link's 4-GPU alpha is 25 us): then the measurements win, and alpha for this group is derived
    // from them as the cluster file derives the link's: t(smallest S) - S * factor / busbw(largest).
    double shortest = measured.front().second;
    for (const auto& point : measured) shortest = std::min(shortest, point.second);
    if (!(latency_ < shortest)) {
      const double smallest_bytes = std::exp(measured.front().first);
      latency_ = std::max(0.0, measured.front().second - smallest_bytes * factor / largest_busbw);
      if (latency_ >= shortest) latency_ = 0.5 * shortest;  // points that contradict each other: stay below all
    }
  }
  for (const auto& [log_bytes, call_seconds] : measured) {
    // The bandwidth of the term after alpha, so that alpha + S * factor / B_eff is the measured time.
    log_bytes_.push_back(log_bytes);
    bandwidth_.push_back(std::exp(log_bytes) * factor / (call_seconds - latency_));
  }
}

double BandwidthCurve::seconds(double bytes) const {
  if (bytes <= 0.0 || factor_ == 0.0) return 0.0;
  double bandwidth = asymptote_;
  if (!log_bytes_.empty()) {
    const double x = std::log(bytes);
    if (x <= log_bytes_.front()) {
      bandwidth = bandwidth_.front();
    } else if (x >= log_bytes_.back()) {
      bandwidth = bandwidth_.back();
    } else {
      // Few points (three sizes per collective in a typical profile): a linear scan beats a binary search.
      std::size_t i = 1;
      while (log_bytes_[i] < x) ++i;
      const double w = (x - log_bytes_[i - 1]) / (log_bytes_[i] - log_bytes_[i - 1]);
      bandwidth = bandwidth_[i - 1] + w * (bandwidth_[i] - bandwidth_[i - 1]);
    }
  }
  return latency_ + bytes * factor_ / bandwidth;
}

namespace {

// The measured points of one collective for the group size closest to `ranks` (exact size first, then the
// nearest, the smaller on a tie).
std::vector<CollectiveBandwidthPoint> points_for(const InterconnectDescription& link, CollectiveKind kind,
                                                 int ranks) {
  int best_ranks = 0;
  for (const CollectiveBandwidthPoint& point : link.measured) {
    if (point.kind != kind) continue;
    const int distance = std::abs(point.ranks - ranks);
    const int best_distance = std::abs(best_ranks - ranks);
    if (best_ranks == 0 || distance < best_distance || (distance == best_distance && point.ranks < best_ranks)) {
      best_ranks = point.ranks;
    }
  }
  std::vector<CollectiveBandwidthPoint> points;
  for (const CollectiveBandwidthPoint& point : link.measured) {
    if (point.kind == kind && point.ranks == best_ranks) points.push_back(point);
  }
  return points;
}

// `share`: the fraction of the link's bandwidth one GPU's traffic gets (1 inside a node; 1/g across nodes, where the
// node's g GPUs share its network).
std::array<BandwidthCurve, 3> curves_for(const ClusterDescription& cluster, const InterconnectDescription& link,
                                         const std::string& field, int ranks, double share) {
  std::array<BandwidthCurve, 3> curves;
  if (ranks <= 1) return curves;
  for (CollectiveKind kind :
       {CollectiveKind::all_reduce, CollectiveKind::reduce_scatter, CollectiveKind::all_gather}) {
    auto points = points_for(link, kind, ranks);
    for (CollectiveBandwidthPoint& point : points) point.bus_bandwidth *= share;
    if (points.empty() && !(link.bus_bandwidth > 0.0)) {
      throw InputError(cluster.source, field + ".bus_bandwidth",
                       "is " + std::to_string(link.bus_bandwidth) + " and no measured " + to_string(kind) +
                           " points are given; expected a bandwidth > 0 bytes/s for a group of " +
                           std::to_string(ranks) + " GPUs");
    }
    if (!(link.latency_seconds >= 0.0) || !std::isfinite(link.latency_seconds)) {
      throw InputError(cluster.source, field + ".latency_seconds", "expected a finite latency >= 0 seconds");
    }
    try {
      curves[static_cast<int>(kind)] =
          BandwidthCurve(points, collective_factor(kind, ranks), link.latency_seconds, link.bus_bandwidth * share);
    } catch (const InputError& error) {
      throw InputError(cluster.source, field + "." + error.field(), error.problem());
    }
  }
  return curves;
}

}  // namespace

CollectiveTimer::CollectiveTimer(const ClusterDescription& cluster, int ranks) : ranks_(ranks) {
  if (ranks < 1) throw InputError(cluster.source, "gpus", "a collective needs at least 1 GPU, got " +
                                                              std::to_string(ranks));
  if (cluster.gpus_per_node < 1) {
    throw InputError(cluster.source, "gpus_per_node", "expected at least 1 GPU per node");
  }
  if (ranks <= cluster.gpus_per_node) {
    gpus_per_node_ = ranks;
    nodes_ = 1;
  } else {
    gpus_per_node_ = cluster.gpus_per_node;
    nodes_ = (ranks + cluster.gpus_per_node - 1) / cluster.gpus_per_node;
  }
  intra_ = curves_for(cluster, cluster.intra_node, "intra_node", gpus_per_node_, 1.0);
  intra_fraction_beside_compute_ = cluster.intra_node.bandwidth_fraction_beside_compute;
  if (ranks > 1) grouped_call_ = cluster.intra_node.grouped_call();
  if (nodes_ > 1) {
    inter_ = curves_for(cluster, cluster.inter_node, "inter_node", nodes_, 1.0 / static_cast<double>(gpus_per_node_));
    grouped_call_ = std::max(grouped_call_, cluster.inter_node.grouped_call());
  }
}

double CollectiveTimer::grouped_seconds_beside_compute(CollectiveKind kind, Bytes bytes, std::int64_t calls) const {
  if (ranks_ <= 1 || bytes <= 0) return 0.0;
  return seconds_beside_compute(kind, bytes) +
         static_cast<double>(std::max<std::int64_t>(calls, 1) - 1) * grouped_call_;
}

double CollectiveTimer::seconds(CollectiveKind kind, Bytes bytes) const { return timed(kind, bytes, 1.0); }

double CollectiveTimer::seconds_beside_compute(CollectiveKind kind, Bytes bytes) const {
  return timed(kind, bytes, intra_fraction_beside_compute_);
}

double CollectiveTimer::timed(CollectiveKind kind, Bytes bytes, double intra_fraction) const {
  if (ranks_ <= 1 || bytes <= 0) return 0.0;
  const double s = static_cast<double>(bytes);
  const auto intra = [&](CollectiveKind k, double b) { return intra_[static_cast<int>(k)].seconds(b) / intra_fraction; };
  if (nodes_ == 1) return intra(kind, s);
  const auto inter = [&](CollectiveKind k, double b) { return inter_[static_cast<int>(k)].seconds(b); };
  // Each GPU carries its 1/g slice across nodes, at its 1/g share of the node's network (inter_ curves).
  const double per_rail = s / gpus_per_node_;
  switch (kind) {
    case CollectiveKind::all_reduce:
      return intra(CollectiveKind::reduce_scatter, s) + inter(CollectiveKind::all_reduce, per_rail) +
             intra(CollectiveKind::all_gather, s);
    case CollectiveKind::reduce_scatter:
      return intra(CollectiveKind::reduce_scatter, s) + inter(CollectiveKind::reduce_scatter, per_rail);
    case CollectiveKind::all_gather:
      return inter(CollectiveKind::all_gather, per_rail) + intra(CollectiveKind::all_gather, s);
  }
  return 0.0;
}

}  // namespace zeroplan
