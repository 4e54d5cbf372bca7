#include "reader/range_reader.h"

#include <algorithm>
#include <cmath>

namespace kiln {

void RequestStats::AddLatencyUs(int64_t us) {
  const double x = us < 1 ? 0.0 : 4.0 * std::log2(static_cast<double>(us));
  const size_t b = std::min<size_t>(kLatencyBuckets - 1, static_cast<size_t>(x));
  ++latency[b];
}

uint64_t RequestStats::attempts() const {
  uint64_t n = 0;
  for (uint64_t c : latency) n += c;
  return n;
}

int64_t RequestStats::LatencyQuantileUs(double q) const {
  const uint64_t n = attempts();
  if (n == 0) return 0;
  // The smallest bucket holding at least ceil(q * n) of the attempts (at least one).
  const uint64_t want = std::max<uint64_t>(1, static_cast<uint64_t>(std::ceil(q * n)));
  uint64_t seen = 0;
  for (size_t b = 0; b < kLatencyBuckets; ++b) {
    seen += latency[b];
    if (seen >= want) return static_cast<int64_t>(std::ceil(std::exp2((b + 1) / 4.0)));
  }
  return static_cast<int64_t>(std::exp2(kLatencyBuckets / 4.0));
}

void RequestStats::Add(const RequestStats& o) {
  requests += o.requests;
  bytes += o.bytes;
  retries += o.retries;
  failures += o.failures;
  hedges += o.hedges;
  hedge_wins += o.hedge_wins;
  cache_reads += o.cache_reads;
  cache_bytes += o.cache_bytes;
  for (size_t b = 0; b < kLatencyBuckets; ++b) latency[b] += o.latency[b];
}

RequestStats RequestStats::Since(const RequestStats& e) const {
  RequestStats d;
  d.requests = requests - e.requests;
  d.bytes = bytes - e.bytes;
  d.retries = retries - e.retries;
  d.failures = failures - e.failures;
  d.hedges = hedges - e.hedges;
  d.hedge_wins = hedge_wins - e.hedge_wins;
  d.cache_reads = cache_reads - e.cache_reads;
  d.cache_bytes = cache_bytes - e.cache_bytes;
  for (size_t b = 0; b < kLatencyBuckets; ++b) d.latency[b] = latency[b] - e.latency[b];
  return d;
}

}  // namespace kiln
