// Lower bounds on every order of a placement: preemptive per-device bounds and micro-batch paths.
#include "flexpipe/search/bound.h"

#include <algorithm>
#include <queue>

namespace flexpipe {

namespace {

// One operation of a device in the single-machine relaxation: it cannot start before `release`, and
// at least `tail` must follow its end.
struct Job {
  double release = 0, work = 0, tail = 0;
};

// Jackson's preemptive schedule: whenever a job is released or ends, run the released job with the
// longest tail. It is optimal for one machine with releases and tails when jobs may be interrupted,
// so its max(end + tail) bounds every non-preemptive order of the same jobs from below.
double preemptive_bound(std::vector<Job>& jobs) {
  std::sort(jobs.begin(), jobs.end(), [](const Job& a, const Job& b) { return a.release < b.release; });
  std::vector<double> left(jobs.size());
  for (size_t j = 0; j < jobs.size(); ++j) left[j] = jobs[j].work;
  std::priority_queue<std::pair<double, size_t>> ready;  // (tail, job)
  double now = 0, bound = 0;
  size_t next = 0;
  while (next < jobs.size() || !ready.empty()) {
    if (ready.empty()) now = std::max(now, jobs[next].release);
    while (next < jobs.size() && jobs[next].release <= now) ready.push({jobs[next].tail, next}), ++next;
    const size_t j = ready.top().second;
    const double until = next < jobs.size() ? jobs[next].release : kInfinity;
    if (now + left[j] <= until) {
      now += left[j];
      bound = std::max(bound, now + jobs[j].tail);
      ready.pop();
    } else {
      left[j] -= until - now;  // interrupted by the next release; it stays ready
      now = until;
    }
  }
  return bound;
}

// One pipeline's stage costs along its chunks, as the bound sees them.
struct Path {
  std::vector<double> forward, rebuild, backward, weight, transfer;  // transfer[c]: chunk c to c + 1
};

// The releases and tails of one pipeline's operations, by rank: the k-th operation of a kind to start
// at chunk c (k = 0, 1, ...) needs k + 1 of its predecessors done, because micro-batches are
// interchangeable and a chunk's operations run one at a time on its device; the k-th from the end
// is followed by the k operations of its kind after it and by the way of the k + 1 micro-batches
// still to pass the chunks below (or above).
void add_pipeline_jobs(const Path& path, int m, const std::vector<int>& device_of,
                       std::vector<std::vector<Job>>& jobs) {
  const int S = static_cast<int>(path.forward.size());
  auto at = [m](int c, int k) { return static_cast<size_t>(c) * m + k; };
  std::vector<double> f_end(S * m), r_end(S * m), b_end(S * m), w_end(S * m);
  for (int c = 0; c < S; ++c)
    for (int k = 0; k < m; ++k) {
      double start = k > 0 ? f_end[at(c, k - 1)] : 0;
      if (c > 0) start = std::max(start, f_end[at(c - 1, k)] + path.transfer[c - 1]);
      f_end[at(c, k)] = start + path.forward[c];
    }
  for (int c = 0; c < S; ++c)
    for (int k = 0; k < m; ++k)
      r_end[at(c, k)] = std::max(f_end[at(c, k)], k > 0 ? r_end[at(c, k - 1)] : 0) + path.rebuild[c];
  for (int c = S - 1; c >= 0; --c)
    for (int k = 0; k < m; ++k) {
      double start = std::max(r_end[at(c, k)], k > 0 ? b_end[at(c, k - 1)] : 0);
      if (c + 1 < S) start = std::max(start, b_end[at(c + 1, k)] + path.transfer[c]);
      b_end[at(c, k)] = start + path.backward[c];
      w_end[at(c, k)] = std::max(b_end[at(c, k)], k > 0 ? w_end[at(c, k - 1)] : 0) + path.weight[c];
    }
  // Tails by rank from the end (k = 0 is the last of its kind at that chunk).
  std::vector<double> b_tail(S * m), r_tail(S * m), f_tail(S * m);
  for (int c = 0; c < S; ++c)
    for (int k = 0; k < m; ++k) {
      // The k backwards after it here, and the k + 1 weight gradients of those micro-batches.
      double tail = k * path.backward[c] + (k + 1) * path.weight[c];
      if (k > 0) tail = std::max(tail, b_tail[at(c, k - 1)] + path.backward[c]);
      if (c > 0) tail = std::max(tail, path.transfer[c - 1] + path.backward[c - 1] + b_tail[at(c - 1, k)]);
      b_tail[at(c, k)] = tail;
      r_tail[at(c, k)] = std::max(path.backward[c] + tail, k > 0 ? r_tail[at(c, k - 1)] + path.rebuild[c] : 0);
    }
  for (int c = S - 1; c >= 0; --c)
    for (int k = 0; k < m; ++k) {
      double tail = path.rebuild[c] > 0 ? path.rebuild[c] + r_tail[at(c, k)] : path.backward[c] + b_tail[at(c, k)];
      if (k > 0) tail = std::max(tail, f_tail[at(c, k - 1)] + path.forward[c]);
      if (c + 1 < S) tail = std::max(tail, path.transfer[c] + path.forward[c + 1] + f_tail[at(c + 1, k)]);
      f_tail[at(c, k)] = tail;
    }
  for (int c = 0; c < S; ++c) {
    std::vector<Job>& list = jobs[device_of[c]];
    for (int k = 0; k < m; ++k) {
      const int last = m - 1 - k;  // the k-th to start is the (m - 1 - k)-th from the end
      list.push_back({f_end[at(c, k)] - path.forward[c], path.forward[c], f_tail[at(c, last)]});
      if (path.rebuild[c] > 0)
        list.push_back({r_end[at(c, k)] - path.rebuild[c], path.rebuild[c], r_tail[at(c, last)]});
      list.push_back({b_end[at(c, k)] - path.backward[c], path.backward[c], b_tail[at(c, last)]});
      if (path.weight[c] > 0) list.push_back({w_end[at(c, k)] - path.weight[c], path.weight[c], last * path.weight[c]});
    }
  }
}

// The closed-form terms, per pipeline and device: one micro-batch's way up and down; the last
// forward of a chunk; the first backward's arrival plus m backwards there; a device's first input
// plus all of its work; its first gradient plus all of its backward work.
double path_bound(const Schedule& skeleton, const std::vector<Path>& paths, const std::vector<int>& per_pipeline) {
  const int S = skeleton.stages_per_pipeline, P = skeleton.num_devices;
  std::vector<double> work(P, 0), head(P, kInfinity), first_gradient(P, kInfinity), backward_work(P, 0);
  double bound = 0;
  for (int q = 0; q < skeleton.num_pipelines; ++q) {
    const int m = per_pipeline[q];
    if (m == 0) continue;
    const Path& path = paths[q];
    auto device_of = [&](int c) { return skeleton.stage_device[q * S + c]; };
    double up = 0, down = 0;
    for (int c = 0; c < S; ++c) {
      work[device_of(c)] += m * (path.forward[c] + path.rebuild[c] + path.backward[c] + path.weight[c]);
      up += path.forward[c] + path.transfer[c];
      down += path.backward[c] + path.transfer[c];
    }
    const double last_weight = path.weight[0];
    bound = std::max(bound, up + down + last_weight);
    double arrival = 0, above = 0;  // a forward's arrival at chunk c; the backwards above chunk c
    for (int c = 0; c < S; ++c) {
      head[device_of(c)] = std::min(head[device_of(c)], arrival);
      bound = std::max(bound, arrival + (m - 1) * path.forward[c] + (up - arrival) + down + last_weight);
      arrival += path.forward[c] + path.transfer[c];
    }
    for (int c = S - 1; c >= 0; --c) {
      const double reach = above + path.transfer[c];  // from the top down to chunk c
      const double below = down - reach - path.backward[c];
      bound = std::max(bound, up + reach + m * path.backward[c] + below + last_weight);
      above += path.backward[c] + path.transfer[c];
      first_gradient[device_of(c)] = std::min(first_gradient[device_of(c)], up + reach);
      backward_work[device_of(c)] += m * (path.backward[c] + path.weight[c]);
    }
  }
  for (int d = 0; d < P; ++d) {
    if (work[d] > 0) bound = std::max(bound, head[d] + work[d]);
    if (backward_work[d] > 0) bound = std::max(bound, first_gradient[d] + backward_work[d]);
  }
  return bound;
}

std::vector<Path> paths_of(const Schedule& skeleton, const CostTable& costs, bool split,
                           const std::vector<char>& recompute) {
  const int S = skeleton.stages_per_pipeline;
  std::vector<Path> paths(skeleton.num_pipelines);
  for (int q = 0; q < skeleton.num_pipelines; ++q) {
    Path& path = paths[q];
    for (int c = 0; c < S; ++c) {
      const StageCosts& row = costs.stages[c];
      path.forward.push_back(row.forward);
      path.rebuild.push_back(!recompute.empty() && recompute[q * S + c] ? row.recompute : 0);
      path.backward.push_back(split ? row.backward_input : row.backward);
      path.weight.push_back(split ? row.backward_weight : 0);
      const int from = skeleton.stage_device[q * S + c], to = c + 1 < S ? skeleton.stage_device[q * S + c + 1] : from;
      path.transfer.push_back(from != to ? costs.link_between(from, to).transfer_time(row.output_bytes) : 0);
    }
  }
  return paths;
}

std::vector<int> microbatches_per_pipeline(const Schedule& skeleton) {
  std::vector<int> per_pipeline(skeleton.num_pipelines, 0);
  for (int mb = 0; mb < skeleton.num_microbatches; ++mb) ++per_pipeline[skeleton.pipeline_of_microbatch(mb)];
  return per_pipeline;
}

}  // namespace

double schedule_path_bound(const Schedule& skeleton, const CostTable& costs, bool split,
                           const std::vector<char>& recompute) {
  return path_bound(skeleton, paths_of(skeleton, costs, split, recompute), microbatches_per_pipeline(skeleton));
}

double schedule_lower_bound(const Schedule& skeleton, const CostTable& costs, bool split,
                            const std::vector<char>& recompute) {
  const int S = skeleton.stages_per_pipeline;
  const std::vector<Path> paths = paths_of(skeleton, costs, split, recompute);
  const std::vector<int> per_pipeline = microbatches_per_pipeline(skeleton);
  std::vector<std::vector<Job>> jobs(skeleton.num_devices);
  for (int q = 0; q < skeleton.num_pipelines; ++q) {
    if (per_pipeline[q] == 0) continue;
    const std::vector<int> device_of(skeleton.stage_device.begin() + q * S,
                                     skeleton.stage_device.begin() + (q + 1) * S);
    add_pipeline_jobs(paths[q], per_pipeline[q], device_of, jobs);
  }
  double bound = path_bound(skeleton, paths, per_pipeline);
  for (std::vector<Job>& list : jobs) bound = std::max(bound, preemptive_bound(list));
  return bound;
}

}  // namespace flexpipe
