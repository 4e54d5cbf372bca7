// batch_class_mix: how well a read order mixes classes into batches, measured through the real
// kiln::Loader on a packed dataset (BENCHMARKS.md, "Block order: shuffle quality").
//
//   batch_class_mix DATASET [BATCH=256] [EPOCHS=2] [ORDER...]
//   ORDER: exact | none | block:BLOCK_SAMPLES:WINDOW_BLOCKS   (default: exact, then the block
//          orders 64:4 64:16 512:4 512:16)
//
// For each order it reads EPOCHS epochs (labels only are looked at) and compares each full
// batch's class counts c_k with the i.i.d. expectation B p_k (p_k = the class's share of the
// dataset): the per-batch Pearson statistic X2 = sum_k (c_k - B p_k)^2 / (B p_k), reported as
// its mean over batches divided by K - 1 (1.0 for i.i.d. draws with replacement; a uniform
// shuffle, which draws without replacement, gives slightly less), and the mean total variation
// distance TV = 1/2 sum_k |c_k / B - p_k|. Also: the mean number of distinct classes per batch.
// Prints one line per order and, with --json as the last argument, one JSON object per line.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "reader/loader.h"

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: batch_class_mix DATASET [BATCH] [EPOCHS] [ORDER...] [--json]\n");
    return 2;
  }
  bool json = std::strcmp(argv[argc - 1], "--json") == 0;
  if (json) --argc;
  const std::string dir = argv[1];
  const uint32_t batch = argc > 2 ? static_cast<uint32_t>(std::strtoul(argv[2], nullptr, 10)) : 256;
  const int epochs = argc > 3 ? std::atoi(argv[3]) : 2;
  std::vector<std::string> orders;
  for (int i = 4; i < argc; ++i) orders.push_back(argv[i]);
  if (orders.empty())
    orders = {"exact", "block:64:4", "block:64:16", "block:512:4", "block:512:16"};

  auto dataset_or = kiln::Dataset::Open(dir);
  if (!dataset_or.ok())
    return std::fprintf(stderr, "%s\n", dataset_or.status().ToString().c_str()), 1;
  std::shared_ptr<const kiln::Dataset> dataset(std::move(dataset_or).value());
  const uint64_t sample_bytes = dataset->schema().sample_bytes();

  for (const std::string& order : orders) {
    kiln::LoaderOptions o;
    o.batch_size = batch;
    o.num_threads = 2;
    o.drop_last = true;
    o.pin_memory = false;
    o.seed = 1;
    uint64_t block_samples = 0, window = 0;
    if (order == "exact") {
      o.shuffle = kiln::ShuffleMode::kExact;
    } else if (order == "none") {
      o.shuffle = kiln::ShuffleMode::kNone;
    } else if (std::sscanf(order.c_str(), "block:%lu:%lu", &block_samples, &window) == 2) {
      o.shuffle = kiln::ShuffleMode::kBlock;
      o.block_bytes = block_samples * sample_bytes;
      o.shuffle_window = static_cast<uint32_t>(window);
    } else {
      std::fprintf(stderr, "bad order %s\n", order.c_str());
      return 2;
    }
    auto loader_or = kiln::Loader::Create(dataset, o);
    if (!loader_or.ok())
      return std::fprintf(stderr, "%s\n", loader_or.status().ToString().c_str()), 1;
    kiln::Loader& loader = **loader_or;
    std::vector<uint64_t> class_count;  // over the dataset, from the first epoch
    std::vector<std::vector<uint64_t>> batches;
    for (int e = 0; e < epochs; ++e) {
      loader.SetEpoch(static_cast<uint64_t>(e));
      kiln::Batch b;
      while (true) {
        auto r = loader.Next(&b);
        if (!r.ok()) return std::fprintf(stderr, "%s\n", r.status().ToString().c_str()), 1;
        if (!*r) break;
        std::vector<uint64_t> counts;
        for (uint32_t k = 0; k < b.size; ++k) {
          const uint64_t label = static_cast<uint64_t>(b.labels[k]);
          if (label >= counts.size()) counts.resize(label + 1);
          ++counts[label];
          if (e == 0) {
            if (label >= class_count.size()) class_count.resize(label + 1);
            ++class_count[label];
          }
        }
        batches.push_back(std::move(counts));
      }
    }
    uint64_t total = 0;
    for (uint64_t c : class_count) total += c;
    const size_t classes = class_count.size();
    double x2_sum = 0, tv_sum = 0, distinct_sum = 0;
    for (std::vector<uint64_t>& counts : batches) {
      counts.resize(classes);
      double x2 = 0, tv = 0, distinct = 0;
      for (size_t k = 0; k < classes; ++k) {
        const double p = static_cast<double>(class_count[k]) / total;
        if (p == 0) continue;
        const double expected = batch * p, d = counts[k] - expected;
        x2 += d * d / expected;
        tv += std::fabs(counts[k] / static_cast<double>(batch) - p) / 2;
        distinct += counts[k] > 0;
      }
      x2_sum += x2;
      tv_sum += tv;
      distinct_sum += distinct;
    }
    const double n = static_cast<double>(batches.size());
    const double x2_ratio = x2_sum / n / static_cast<double>(classes - 1);
    if (json) {
      std::printf(
          "{\"order\": \"%s\", \"block_samples\": %lu, \"window\": %lu, \"batch\": %u, "
          "\"batches\": %.0f, \"classes\": %zu, \"x2_over_dof\": %.3f, \"tv\": %.4f, "
          "\"distinct_classes\": %.2f}\n",
          order.c_str(), block_samples, window, batch, n, classes, x2_ratio, tv_sum / n,
          distinct_sum / n);
    } else {
      std::printf("%-14s batches %6.0f  X2/(K-1) %8.3f  TV %.4f  classes per batch %.2f of %zu\n",
                  order.c_str(), n, x2_ratio, tv_sum / n, distinct_sum / n, classes);
    }
  }
  return 0;
}
