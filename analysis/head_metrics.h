#pragma once
// What each attention head does, in five numbers over its weights (Clark et al. 2019, "What Does
// BERT Look At?", and Voita et al. 2019 use the same): how spread its attention is, how far it
// looks, and how much of it lands on three fixed places.
//
// For weights w [heads, S, S] (row i: query i's distribution over keys j), each averaged over
// the real queries i < length:
//
//   entropy   -sum_j w_ij log w_ij, in nats (0 log 0 = 0): 0 for a head that looks at one key,
//             log(n) for one spread evenly over n keys
//   distance  sum_j w_ij |i - j|, in positions
//   previous  w_i,i-1: the weight on the token before (over the queries i >= 1 that have one)
//   same      w_ii: the weight on the query's own token
//   first     w_i0: the weight on the first token
//
// Only keys j < length are read: past `length` is padding. The uniform baseline of entropy and
// distance (a head spreading its weight evenly over the keys it may see: j < length, and j <= i
// when causal) puts both on a scale from 0 to about 1, which is what plots draw.
#include <cstdint>
#include <vector>

#include "tapegrad/autograd/tensor.h"

namespace tg::analysis {

struct HeadMetrics {
  double entropy = 0, distance = 0, previous = 0, same = 0, first = 0;
  double uniform_entropy = 0, uniform_distance = 0;  // the same averages for uniform attention
};

// Sums over queries, so that several sequences of different lengths average correctly: add the
// totals of each sequence, then take mean().
struct HeadMetricTotals {
  double entropy = 0, distance = 0, previous = 0, same = 0, first = 0;
  double uniform_entropy = 0, uniform_distance = 0;
  int64_t queries = 0;                // real queries summed over
  int64_t queries_with_previous = 0;  // of them, those with a token before (i >= 1)

  HeadMetricTotals& operator+=(const HeadMetricTotals& other);
  HeadMetrics mean() const;  // each sum over its count (0 where the count is 0)
};

// One entry a head. weights: [heads, S, S] floating, any device; length in [1, S] (-1: S).
std::vector<HeadMetricTotals> head_metric_totals(const Tensor& weights, int64_t length = -1,
                                                 bool causal = false);

// head_metric_totals(...)[h].mean() for every head.
std::vector<HeadMetrics> head_metrics(const Tensor& weights, int64_t length = -1, bool causal = false);

}  // namespace tg::analysis
