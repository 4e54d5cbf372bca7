// Tests of kiln::Loader (with the Augmenter and HostBuffer it uses) through real datasets
// written to disk at test time: completeness and content of every epoch, sampler order,
// determinism across thread and prefetch settings, epoch control, ranks, augmentation, a
// corrupt record, a slow consumer, destruction mid-epoch, and the reader's field cases.
#include "reader/loader.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "formats/manifest.h"
#include "formats/shards/shard_reader.h"
#include "reader/augmenter.h"
#include "reader/host_buffer.h"
#include "reader/sampler.h"
#include "tests/reader/test_dataset.h"

namespace kiln {
namespace {

using kiln::testing::MakeSchema;
using kiln::testing::SampleBytes;
using kiln::testing::SampleLabel;
using kiln::testing::TestDataset;
using kiln::testing::TestDatasetOptions;

// ---------------------------------------------------------------------------------------------
// Helpers.

// A batch copied out of the loader's slot.
struct Got {
  uint64_t epoch = 0;
  uint64_t index = 0;
  TensorSchema schema;
  std::vector<uint64_t> ids;
  std::vector<int64_t> labels;
  std::vector<uint8_t> padding;
  std::vector<uint8_t> data;
  bool pinned = false;
};

Got Copy(const Batch& b) {
  Got g;
  g.epoch = b.epoch;
  g.index = b.index;
  g.schema = b.schema;
  g.ids.assign(b.sample_indices, b.sample_indices + b.size);
  g.labels.assign(b.labels, b.labels + b.size);
  g.padding.assign(b.is_padding, b.is_padding + b.size);
  g.data.assign(b.data, b.data + b.bytes());
  g.pinned = b.pinned;
  return g;
}

uint64_t Fnv1a(const void* data, size_t size, uint64_t h = 0xCBF29CE484222325ull) {
  const uint8_t* p = static_cast<const uint8_t*>(data);
  for (size_t i = 0; i < size; ++i) h = (h ^ p[i]) * 0x100000001B3ull;
  return h;
}

LoaderOptions Opts(uint32_t batch, uint32_t threads, uint32_t prefetch = 2, bool shuffle = true,
                   uint64_t seed = 0) {
  LoaderOptions o;
  o.batch_size = batch;
  o.num_threads = threads;
  o.prefetch = prefetch;
  o.shuffle = shuffle ? ShuffleMode::kExact : ShuffleMode::kNone;
  o.seed = seed;
  o.pin_memory = false;
  return o;
}

std::unique_ptr<Loader> MustOpen(const TestDataset& ds, const LoaderOptions& o) {
  Result<std::unique_ptr<Loader>> l = Loader::Open(ds.dir(), o);
  EXPECT_TRUE(l.ok()) << l.status().ToString();
  if (!l.ok()) return nullptr;
  return std::move(l).value();
}

// Reads the loader's current epoch up to the Next() that returns false (at most
// batches_per_epoch + 1 calls, so a loader that never ends fails instead of hanging).
std::vector<Got> ReadEpoch(Loader& loader) {
  std::vector<Got> out;
  const uint64_t limit = loader.batches_per_epoch() + 1;
  for (uint64_t i = 0; i < limit; ++i) {
    Batch b;
    Result<bool> r = loader.Next(&b);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    if (!r.ok() || !*r) return out;
    out.push_back(Copy(b));
  }
  ADD_FAILURE() << "the epoch did not end after " << limit << " batches";
  return out;
}

// The per-rank batch plan a Sampler with the loader's options gives for `epoch`.
std::vector<std::vector<uint64_t>> SamplerPlan(uint64_t n, const LoaderOptions& o, uint64_t epoch,
                                               uint64_t sample_bytes = 192) {
  SamplerOptions so;
  so.num_samples = n;
  so.batch_size = o.batch_size;
  so.shuffle = o.shuffle;
  so.block_samples = std::max<uint64_t>(1, o.block_bytes / sample_bytes);
  so.window_blocks = o.shuffle_window;
  so.seed = o.seed;
  so.drop_last = o.drop_last;
  so.tail = o.tail_policy;
  so.rank = o.rank;
  so.world_size = o.world_size;
  Result<Sampler> s = Sampler::Create(so);
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  if (!s.ok()) return {};
  s->SetEpoch(epoch);
  std::vector<std::vector<uint64_t>> plan(s->batches_per_epoch());
  for (uint64_t b = 0; b < plan.size(); ++b) {
    plan[b].resize(s->BatchSize(b));
    std::vector<uint8_t> pad(plan[b].size());
    s->BatchSamples(b, 0, static_cast<uint32_t>(plan[b].size()), plan[b].data(), pad.data());
  }
  return plan;
}

// Checks every sample's bytes and label against the known per-index content (no augmentation).
void ExpectKnownContent(const Got& g, const TensorSchema& schema) {
  ASSERT_EQ(g.schema, schema);
  ASSERT_EQ(g.data.size(), g.ids.size() * schema.sample_bytes());
  for (size_t k = 0; k < g.ids.size(); ++k) {
    const std::vector<uint8_t> want = SampleBytes(schema, g.ids[k]);
    EXPECT_EQ(std::memcmp(g.data.data() + k * want.size(), want.data(), want.size()), 0)
        << "epoch " << g.epoch << " batch " << g.index << " position " << k << " sample "
        << g.ids[k];
    EXPECT_EQ(g.labels[k], SampleLabel(g.ids[k])) << "sample " << g.ids[k];
  }
}

// Checks one epoch read from a loader: batch numbering, sampler order, content, and (for a
// single rank without drop_last) every sample exactly once.
void ExpectCompleteEpoch(const std::vector<Got>& epoch, const TestDataset& ds,
                         const LoaderOptions& o, uint64_t epoch_number) {
  const auto plan = SamplerPlan(ds.num_samples(), o, epoch_number);
  ASSERT_EQ(epoch.size(), plan.size()) << "epoch " << epoch_number;
  std::vector<int> seen(ds.num_samples(), 0);
  for (size_t b = 0; b < epoch.size(); ++b) {
    EXPECT_EQ(epoch[b].epoch, epoch_number);
    EXPECT_EQ(epoch[b].index, b);
    EXPECT_EQ(epoch[b].ids, plan[b]) << "epoch " << epoch_number << " batch " << b;
    ExpectKnownContent(epoch[b], ds.schema());
    for (uint64_t id : epoch[b].ids) ++seen[id];
  }
  if (o.world_size == 1 && !o.drop_last) {
    for (uint64_t i = 0; i < seen.size(); ++i) {
      EXPECT_EQ(seen[i], 1) << "epoch " << epoch_number << " sample " << i;
    }
  }
}

// The crop and flip of ApplyAugment, written from its header: the rows [top, top + oh) and
// columns [left, left + ow) of the stored sample, mirrored left-right within the crop.
std::vector<uint8_t> ReferenceAugment(const std::vector<uint8_t>& in, const TensorSchema& s,
                                      const AugmentParams& p, uint32_t oh, uint32_t ow) {
  const size_t elem = DTypeSize(s.dtype), c = s.channels;
  std::vector<uint8_t> out(size_t{oh} * ow * c * elem);
  for (uint32_t y = 0; y < oh; ++y) {
    for (uint32_t x = 0; x < ow; ++x) {
      const size_t sy = p.top + y, sx = p.left + (p.flip ? ow - 1 - x : x);
      for (size_t ch = 0; ch < c; ++ch) {
        const size_t src = s.layout == Layout::kHWC ? (sy * s.width + sx) * c + ch
                                                    : (ch * s.height + sy) * s.width + sx;
        const size_t dst =
            s.layout == Layout::kHWC ? (size_t{y} * ow + x) * c + ch : (ch * oh + y) * ow + x;
        std::memcpy(out.data() + dst * elem, in.data() + src * elem, elem);
      }
    }
  }
  return out;
}

// Runs `fn` on a detached thread; returns whether it finished within `limit`.
bool FinishesWithin(std::function<void()> fn, std::chrono::seconds limit) {
  auto done = std::make_shared<std::promise<void>>();
  std::future<void> finished = done->get_future();
  std::thread([fn = std::move(fn), done] {
    fn();
    done->set_value();
  }).detach();
  return finished.wait_for(limit) == std::future_status::ready;
}

// Turns a hung test into a failure with a name: aborts the process when one test runs longer
// than kLimit (a loader that deadlocks blocks Next() forever, which would otherwise only show as
// a CTest timeout much later).
class Watchdog : public ::testing::EmptyTestEventListener {
 public:
  static constexpr std::chrono::seconds kLimit{60};

  void OnTestStart(const ::testing::TestInfo& info) override {
    State& st = state();
    std::lock_guard<std::mutex> lock(st.mu);
    st.name = std::string(info.test_suite_name()) + "." + info.name();
    st.start = std::chrono::steady_clock::now();
    st.running = true;
    if (!st.thread_started) {
      st.thread_started = true;
      std::thread(Watch).detach();
    }
  }
  void OnTestEnd(const ::testing::TestInfo&) override {
    State& st = state();
    std::lock_guard<std::mutex> lock(st.mu);
    st.running = false;
  }

 private:
  struct State {
    std::mutex mu;
    std::string name;                             // guarded by mu
    std::chrono::steady_clock::time_point start;  // guarded by mu
    bool running = false;                         // guarded by mu
    bool thread_started = false;                  // guarded by mu
  };
  // Never destroyed, so the detached watch thread may outlive gtest's listeners at exit.
  static State& state() {
    static State* const st = new State;
    return *st;
  }
  static void Watch() {
    State& st = state();
    for (;;) {
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      std::lock_guard<std::mutex> lock(st.mu);
      if (st.running && std::chrono::steady_clock::now() - st.start > kLimit) {
        std::fprintf(stderr, "watchdog: %s still running after %lld s (a hang?); aborting\n",
                     st.name.c_str(), static_cast<long long>(kLimit.count()));
        std::abort();
      }
    }
  }
};

// Registered before main() runs (gtest_main owns main); gtest owns and deletes the listener.
const bool kWatchdogInstalled = [] {
  ::testing::UnitTest::GetInstance()->listeners().Append(new Watchdog);
  return true;
}();

// ---------------------------------------------------------------------------------------------
// Completeness, content and order.

TEST(LoaderTest, EverySampleOncePerEpochRawSeveralShards) {
  TestDatasetOptions dso;
  dso.num_samples = 300;
  dso.samples_per_shard = 37;
  TestDataset ds(dso);
  ASSERT_TRUE(ds.ok());
  ASSERT_EQ(ds.manifest().files.size(), 9u);
  for (uint32_t threads : {1u, 3u}) {
    const LoaderOptions o = Opts(32, threads, 2, true, 5);
    std::unique_ptr<Loader> loader = MustOpen(ds, o);
    ASSERT_NE(loader, nullptr);
    EXPECT_EQ(loader->num_threads(), threads);
    EXPECT_EQ(loader->batches_per_epoch(), 10u);
    EXPECT_EQ(loader->samples_per_epoch(), 300u);
    for (uint64_t e = 0; e < 2; ++e) {
      SCOPED_TRACE("threads " + std::to_string(threads) + " epoch " + std::to_string(e));
      ExpectCompleteEpoch(ReadEpoch(*loader), ds, o, e);
    }
  }
}

TEST(LoaderTest, EverySampleOncePerEpochZstdSeveralShards) {
  TestDatasetOptions dso;
  dso.num_samples = 300;
  dso.schema = MakeSchema(16, 16, 3);
  dso.compression.codec = Codec::kZstd;
  dso.shard_size_bytes = 8 << 10;
  TestDataset ds(dso);
  ASSERT_TRUE(ds.ok());
  ASSERT_GT(ds.manifest().files.size(), 1u);
  // The records really are compressed (the test bytes are compressible).
  Result<std::unique_ptr<ShardReader>> shard = ShardReader::Open(ds.ShardPath(0));
  ASSERT_TRUE(shard.ok()) << shard.status().ToString();
  EXPECT_EQ((*shard)->entry(0).codec, Codec::kZstd);
  EXPECT_LT((*shard)->entry(0).stored_size, ds.schema().sample_bytes());
  shard->reset();

  const LoaderOptions o = Opts(24, 4, 3, true, 9);
  std::unique_ptr<Loader> loader = MustOpen(ds, o);
  ASSERT_NE(loader, nullptr);
  for (uint64_t e = 0; e < 2; ++e) {
    SCOPED_TRACE("epoch " + std::to_string(e));
    ExpectCompleteEpoch(ReadEpoch(*loader), ds, o, e);
  }
}

TEST(LoaderTest, FloatChwSamplesArriveIntact) {
  TestDatasetOptions dso;
  dso.num_samples = 50;
  dso.schema = MakeSchema(5, 7, 3, Layout::kCHW, DType::kFloat32);
  TestDataset ds(dso);
  ASSERT_TRUE(ds.ok());
  const LoaderOptions o = Opts(8, 2, 1, true, 1);
  std::unique_ptr<Loader> loader = MustOpen(ds, o);
  ASSERT_NE(loader, nullptr);
  EXPECT_EQ(loader->sample_schema(), ds.schema());
  ExpectCompleteEpoch(ReadEpoch(*loader), ds, o, 0);
}

TEST(LoaderTest, BatchesArriveInSamplerOrder) {
  TestDatasetOptions dso;
  dso.num_samples = 257;
  dso.samples_per_shard = 20;
  TestDataset ds(dso);
  ASSERT_TRUE(ds.ok());
  for (bool shuffle : {true, false}) {
    const LoaderOptions o = Opts(16, 4, 3, shuffle, 21);
    std::unique_ptr<Loader> loader = MustOpen(ds, o);
    ASSERT_NE(loader, nullptr);
    for (uint64_t e = 0; e < 3; ++e) {
      const std::vector<Got> epoch = ReadEpoch(*loader);
      const auto plan = SamplerPlan(ds.num_samples(), o, e);
      ASSERT_EQ(epoch.size(), plan.size());
      for (size_t b = 0; b < plan.size(); ++b) {
        EXPECT_EQ(epoch[b].ids, plan[b])
            << "shuffle " << shuffle << " epoch " << e << " batch " << b;
      }
    }
  }
}

// Block order through the loader: the sampler's plan, the same bytes for 1 and 3 threads, and
// over 3 ranks every sample exactly once, each rank reading only its own blocks' shards.
TEST(LoaderTest, BlockOrderIsExactAndDeterministicForAnyThreadCount) {
  TestDatasetOptions dso;
  dso.num_samples = 300;
  dso.samples_per_shard = 37;
  TestDataset ds(dso);
  ASSERT_TRUE(ds.ok());
  std::vector<int> seen(300, 0);
  for (uint32_t rank = 0; rank < 3; ++rank) {
    std::vector<uint64_t> digests;
    for (uint32_t threads : {1u, 3u}) {
      LoaderOptions o = Opts(16, threads, 2, true, 4);
      o.shuffle = ShuffleMode::kBlock;
      o.block_bytes = 10 * ds.schema().sample_bytes() + 5;  // 10 samples per block
      o.shuffle_window = 3;
      o.rank = rank;
      o.world_size = 3;
      std::unique_ptr<Loader> loader = MustOpen(ds, o);
      ASSERT_NE(loader, nullptr);
      for (uint64_t e = 0; e < 2; ++e) {
        const std::vector<Got> epoch = ReadEpoch(*loader);
        const auto plan = SamplerPlan(ds.num_samples(), o, e);
        ASSERT_EQ(epoch.size(), plan.size());
        ASSERT_EQ(epoch.size(), loader->batches_per_epoch());
        uint64_t digest = 0;
        for (size_t b = 0; b < plan.size(); ++b) {
          EXPECT_EQ(epoch[b].ids, plan[b]) << "rank " << rank << " epoch " << e << " batch " << b;
          ExpectKnownContent(epoch[b], ds.schema());
          digest = Fnv1a(epoch[b].data.data(), epoch[b].data.size(), digest ^ b);
          if (threads == 1 && e == 0) {
            for (uint64_t id : epoch[b].ids) ++seen[id];
          }
        }
        digests.push_back(digest);
      }
    }
    EXPECT_EQ(digests[0], digests[2]) << "rank " << rank << " epoch 0, 1 vs 3 threads";
    EXPECT_EQ(digests[1], digests[3]) << "rank " << rank << " epoch 1, 1 vs 3 threads";
    EXPECT_NE(digests[0], digests[1]) << "rank " << rank << ": epochs 0 and 1 read alike";
  }
  for (uint64_t i = 0; i < 300; ++i) EXPECT_EQ(seen[i], 1) << "sample " << i;
}

TEST(LoaderTest, StatsCountWhatNextReturned) {
  TestDatasetOptions dso;
  dso.num_samples = 100;
  TestDataset ds(dso);
  ASSERT_TRUE(ds.ok());
  std::unique_ptr<Loader> loader = MustOpen(ds, Opts(16, 2));
  ASSERT_NE(loader, nullptr);
  ReadEpoch(*loader);
  const LoaderStats stats = loader->stats();
  EXPECT_EQ(stats.batches, 7u);
  EXPECT_EQ(stats.samples, 100u);
  EXPECT_EQ(stats.bytes, 100u * ds.schema().sample_bytes());
}

// ---------------------------------------------------------------------------------------------
// Field cases B36 and B32: determinism and completeness across thread counts.

// B36: 5000 samples, seed 3; threads 1 and 8, prefetch 1 and 4, two runs each: the sequence of
// (batch index -> sample ids, data hash) is identical.
TEST(LoaderTest, FieldCase_B36_SameSequenceAcrossThreadsPrefetchAndRuns) {
  TestDatasetOptions dso;
  dso.num_samples = 5000;
  dso.schema = MakeSchema(4, 4, 3);
  dso.samples_per_shard = 500;
  TestDataset ds(dso);
  ASSERT_TRUE(ds.ok());
  ASSERT_EQ(ds.manifest().files.size(), 10u);

  struct Entry {
    uint64_t epoch, index;
    std::vector<uint64_t> ids;
    uint64_t data_hash, label_hash;
    bool operator==(const Entry& o) const {
      return epoch == o.epoch && index == o.index && ids == o.ids && data_hash == o.data_hash &&
             label_hash == o.label_hash;
    }
  };
  auto sequence = [&](uint32_t threads, uint32_t prefetch) {
    std::vector<Entry> seq;
    std::unique_ptr<Loader> loader = MustOpen(ds, Opts(64, threads, prefetch, true, 3));
    if (loader == nullptr) return seq;
    for (int e = 0; e < 2; ++e) {
      for (const Got& g : ReadEpoch(*loader)) {
        seq.push_back({g.epoch, g.index, g.ids, Fnv1a(g.data.data(), g.data.size()),
                       Fnv1a(g.labels.data(), g.labels.size() * sizeof(int64_t))});
      }
    }
    return seq;
  };
  // The expected sequence, from the sampler and the known bytes alone.
  std::vector<Entry> want;
  const LoaderOptions o = Opts(64, 1, 1, true, 3);
  for (uint64_t e = 0; e < 2; ++e) {
    const auto plan = SamplerPlan(ds.num_samples(), o, e);
    for (uint64_t b = 0; b < plan.size(); ++b) {
      uint64_t h = 0xCBF29CE484222325ull, lh = 0xCBF29CE484222325ull;
      for (uint64_t id : plan[b]) {
        const std::vector<uint8_t> bytes = SampleBytes(ds.schema(), id);
        h = Fnv1a(bytes.data(), bytes.size(), h);
        const int64_t label = SampleLabel(id);
        lh = Fnv1a(&label, sizeof(label), lh);
      }
      want.push_back({e, b, plan[b], h, lh});
    }
  }
  ASSERT_EQ(want.size(), 2u * 79u);
  for (uint32_t threads : {1u, 8u}) {
    for (uint32_t prefetch : {1u, 4u}) {
      for (int run = 0; run < 2; ++run) {
        const std::vector<Entry> got = sequence(threads, prefetch);
        ASSERT_EQ(got.size(), want.size())
            << "threads " << threads << " prefetch " << prefetch << " run " << run;
        for (size_t i = 0; i < want.size(); ++i) {
          ASSERT_TRUE(got[i] == want[i])
              << "threads " << threads << " prefetch " << prefetch << " run " << run << ": entry "
              << i << " (epoch " << want[i].epoch << " batch " << want[i].index << ")";
        }
      }
    }
  }
}

// B32: 16 shards x 10 samples, 1, 4 and 7 threads, shuffle on and off: 160 distinct samples per
// epoch and the same batch count.
TEST(LoaderTest, FieldCase_B32_EveryThreadCountReadsEachSampleOnce) {
  TestDatasetOptions dso;
  dso.num_samples = 160;
  dso.samples_per_shard = 10;
  TestDataset ds(dso);
  ASSERT_TRUE(ds.ok());
  ASSERT_EQ(ds.manifest().files.size(), 16u);
  for (const DataFileInfo& f : ds.manifest().files) EXPECT_EQ(f.samples, 10u);
  for (bool shuffle : {false, true}) {
    uint64_t batches = UINT64_MAX;
    for (uint32_t threads : {1u, 4u, 7u}) {
      std::unique_ptr<Loader> loader = MustOpen(ds, Opts(12, threads, 2, shuffle, 4));
      ASSERT_NE(loader, nullptr);
      for (int e = 0; e < 2; ++e) {
        const std::vector<Got> epoch = ReadEpoch(*loader);
        std::set<uint64_t> distinct;
        uint64_t delivered = 0;
        for (const Got& g : epoch) {
          distinct.insert(g.ids.begin(), g.ids.end());
          delivered += g.ids.size();
          ExpectKnownContent(g, ds.schema());
        }
        EXPECT_EQ(distinct.size(), 160u) << "threads " << threads << " shuffle " << shuffle;
        EXPECT_EQ(delivered, 160u) << "threads " << threads << " shuffle " << shuffle;
        if (batches == UINT64_MAX) batches = epoch.size();
        EXPECT_EQ(epoch.size(), batches) << "threads " << threads << " shuffle " << shuffle;
      }
    }
    EXPECT_EQ(batches, 14u);
  }
}

// ---------------------------------------------------------------------------------------------
// Epoch control.

TEST(LoaderTest, SetEpochMidEpochRestartsWithTheFullEpoch) {
  TestDatasetOptions dso;
  dso.num_samples = 200;
  dso.samples_per_shard = 30;
  TestDataset ds(dso);
  ASSERT_TRUE(ds.ok());
  const LoaderOptions o = Opts(16, 3, 3, true, 8);
  std::unique_ptr<Loader> loader = MustOpen(ds, o);
  ASSERT_NE(loader, nullptr);
  loader->SetEpoch(0);  // the epoch already about to start: free, nothing lost
  Batch b;
  for (int i = 0; i < 3; ++i) {
    Result<bool> r = loader->Next(&b);
    ASSERT_TRUE(r.ok() && *r);
  }
  loader->SetEpoch(0);  // abandon and restart the same epoch
  EXPECT_EQ(loader->epoch(), 0u);
  ExpectCompleteEpoch(ReadEpoch(*loader), ds, o, 0);

  for (int i = 0; i < 2; ++i) {
    Result<bool> r = loader->Next(&b);
    ASSERT_TRUE(r.ok() && *r);
    EXPECT_EQ(b.epoch, 1u);
  }
  loader->SetEpoch(4);  // abandon epoch 1 for epoch 4
  EXPECT_EQ(loader->epoch(), 4u);
  ExpectCompleteEpoch(ReadEpoch(*loader), ds, o, 4);

  // Abandon right after the first batch, many times in a row, then read to the end.
  for (uint64_t e = 10; e < 20; ++e) {
    loader->SetEpoch(e);
    Result<bool> r = loader->Next(&b);
    ASSERT_TRUE(r.ok() && *r);
    EXPECT_EQ(b.epoch, e);
    EXPECT_EQ(b.index, 0u);
  }
  loader->SetEpoch(7);
  ExpectCompleteEpoch(ReadEpoch(*loader), ds, o, 7);
}

TEST(LoaderTest, NextAfterTheEndStartsTheNextEpoch) {
  TestDatasetOptions dso;
  dso.num_samples = 90;
  TestDataset ds(dso);
  ASSERT_TRUE(ds.ok());
  const LoaderOptions o = Opts(16, 2, 2, true, 12);
  std::unique_ptr<Loader> loader = MustOpen(ds, o);
  ASSERT_NE(loader, nullptr);
  std::vector<std::vector<Got>> epochs;
  for (uint64_t e = 0; e < 3; ++e) {
    epochs.push_back(ReadEpoch(*loader));  // ends with the Next() that returned false
    ExpectCompleteEpoch(epochs.back(), ds, o, e);
  }
  EXPECT_NE(epochs[0][0].ids, epochs[1][0].ids);
  // Epoch 1 equals a fresh loader's epoch 1, reached by start_epoch or by SetEpoch.
  LoaderOptions resume = o;
  resume.start_epoch = 1;
  std::unique_ptr<Loader> fresh = MustOpen(ds, resume);
  ASSERT_NE(fresh, nullptr);
  EXPECT_EQ(fresh->epoch(), 1u);
  const std::vector<Got> fresh1 = ReadEpoch(*fresh);
  ASSERT_EQ(fresh1.size(), epochs[1].size());
  for (size_t b = 0; b < fresh1.size(); ++b) {
    EXPECT_EQ(fresh1[b].ids, epochs[1][b].ids);
    EXPECT_EQ(fresh1[b].data, epochs[1][b].data);
  }
  std::unique_ptr<Loader> set = MustOpen(ds, o);
  ASSERT_NE(set, nullptr);
  set->SetEpoch(1);
  const std::vector<Got> set1 = ReadEpoch(*set);
  ASSERT_EQ(set1.size(), epochs[1].size());
  for (size_t b = 0; b < set1.size(); ++b) EXPECT_EQ(set1[b].ids, epochs[1][b].ids);
}

// BeginEpoch is the one epoch counter kiln.Loader uses: a fresh loader's first pass is its
// start epoch; a pass abandoned mid-epoch, or run to its end, is followed by the next epoch;
// SetEpoch picks the pass's epoch.
TEST(LoaderTest, BeginEpochCountsPasses) {
  TestDatasetOptions dso;
  dso.num_samples = 90;
  TestDataset ds(dso);
  ASSERT_TRUE(ds.ok());
  LoaderOptions o = Opts(16, 2, 2, true, 12);
  o.start_epoch = 4;
  std::unique_ptr<Loader> loader = MustOpen(ds, o);
  ASSERT_NE(loader, nullptr);
  EXPECT_TRUE(loader->at_epoch_start());
  EXPECT_EQ(loader->BeginEpoch(), 4u);
  EXPECT_EQ(loader->BeginEpoch(), 4u);  // nothing served yet: still epoch 4
  ExpectCompleteEpoch(ReadEpoch(*loader), ds, o, 4);
  EXPECT_FALSE(loader->at_epoch_start());
  EXPECT_EQ(loader->BeginEpoch(), 5u);  // after the end
  EXPECT_TRUE(loader->at_epoch_start());
  Batch b;
  ASSERT_TRUE(loader->Next(&b).ok());
  EXPECT_EQ(b.epoch, 5u);
  EXPECT_FALSE(loader->at_epoch_start());
  EXPECT_EQ(loader->BeginEpoch(), 6u);  // abandoned mid-epoch
  ExpectCompleteEpoch(ReadEpoch(*loader), ds, o, 6);
  loader->SetEpoch(2);
  EXPECT_EQ(loader->BeginEpoch(), 2u);
  ExpectCompleteEpoch(ReadEpoch(*loader), ds, o, 2);
}

// ValidateLoaderOptions names the option and its range; Create refuses with the same status.
TEST(LoaderTest, ValidateLoaderOptionsNamesTheOption) {
  EXPECT_TRUE(ValidateLoaderOptions(LoaderOptions{}).ok());
  const struct {
    void (*edit)(LoaderOptions*);
    const char* message;
  } cases[] = {
      {[](LoaderOptions* o) { o->batch_size = 0; }, "batch_size 0 must be at least 1"},
      {[](LoaderOptions* o) { o->world_size = 0; }, "world_size 0 must be at least 1"},
      {[](LoaderOptions* o) {
         o->rank = 3;
         o->world_size = 3;
       },
       "rank 3 must be below world_size 3"},
      {[](LoaderOptions* o) { o->prefetch = 65; }, "prefetch 65 must be in [1, 64]"},
      {[](LoaderOptions* o) { o->num_threads = 300; }, "num_threads 300 must be at most 256"},
      {[](LoaderOptions* o) { o->block_bytes = 0; }, "block_bytes 0 must be in [1, 2^40]"},
      {[](LoaderOptions* o) { o->shuffle_window = 0; }, "shuffle_window 0 must be in"},
      {[](LoaderOptions* o) { o->read_ahead_bytes = (uint64_t{4} << 30) + 1; },
       "read_ahead_bytes 4294967297 must be at most 4 GiB"},
      {[](LoaderOptions* o) { o->device = -2; }, "device -2 must be -1"},
      {[](LoaderOptions* o) { o->pin_device = -2; }, "pin_device -2 must be -1"},
  };
  TestDataset ds{TestDatasetOptions{}};
  ASSERT_TRUE(ds.ok());
  for (const auto& c : cases) {
    LoaderOptions o;
    o.pin_memory = false;
    c.edit(&o);
    const Status s = ValidateLoaderOptions(o);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << c.message;
    EXPECT_NE(s.message().find(c.message), std::string::npos) << s.message();
    Result<std::unique_ptr<Loader>> l = Loader::Open(ds.dir(), o);
    ASSERT_FALSE(l.ok()) << c.message;
    EXPECT_EQ(l.status().message(), s.message());
  }
}

// B31 through the loader: a fresh loader resuming at epoch 2 sees the uninterrupted run's
// epoch 2.
TEST(LoaderTest, FieldCase_B31_StartEpochReplaysTheSameEpoch) {
  TestDatasetOptions dso;
  dso.num_samples = 1000;
  dso.schema = MakeSchema(2, 2, 3);
  TestDataset ds(dso);
  ASSERT_TRUE(ds.ok());
  const LoaderOptions o = Opts(100, 2, 2, true, 7);
  std::unique_ptr<Loader> run = MustOpen(ds, o);
  ASSERT_NE(run, nullptr);
  std::vector<std::vector<Got>> epochs;
  for (uint64_t e = 0; e < 3; ++e) epochs.push_back(ReadEpoch(*run));
  EXPECT_NE(epochs[0][0].ids, epochs[1][0].ids);
  EXPECT_NE(epochs[1][0].ids, epochs[2][0].ids);
  LoaderOptions resume = o;
  resume.start_epoch = 2;
  std::unique_ptr<Loader> fresh = MustOpen(ds, resume);
  ASSERT_NE(fresh, nullptr);
  const std::vector<Got> e2 = ReadEpoch(*fresh);
  ASSERT_EQ(e2.size(), epochs[2].size());
  for (size_t b = 0; b < e2.size(); ++b) {
    EXPECT_EQ(e2[b].epoch, 2u);
    EXPECT_EQ(e2[b].ids, epochs[2][b].ids);
    EXPECT_EQ(e2[b].data, epochs[2][b].data);
  }
  ExpectCompleteEpoch(e2, ds, o, 2);
  LoaderOptions seed8 = o;
  seed8.seed = 8;
  std::unique_ptr<Loader> other = MustOpen(ds, seed8);
  ASSERT_NE(other, nullptr);
  EXPECT_NE(ReadEpoch(*other)[0].ids, epochs[0][0].ids);
}

// B33 (a) through the loader: 42 samples, batch 16, shuffle off, two epochs.
TEST(LoaderTest, FieldCase_B33_LastPartialBatchThenNextEpoch) {
  TestDatasetOptions dso;
  dso.num_samples = 42;
  TestDataset ds(dso);
  ASSERT_TRUE(ds.ok());
  const LoaderOptions o = Opts(16, 3, 2, false);
  std::unique_ptr<Loader> loader = MustOpen(ds, o);
  ASSERT_NE(loader, nullptr);
  EXPECT_EQ(loader->batches_per_epoch(), 3u);
  for (uint64_t e = 0; e < 2; ++e) {
    const std::vector<Got> epoch = ReadEpoch(*loader);
    ASSERT_EQ(epoch.size(), 3u);
    EXPECT_EQ(epoch[0].ids.size(), 16u);
    EXPECT_EQ(epoch[1].ids.size(), 16u);
    EXPECT_EQ(epoch[2].ids.size(), 10u);
    EXPECT_EQ(epoch[0].ids[0], 0u) << "epoch " << e << " starts at id 0";
    ExpectCompleteEpoch(epoch, ds, o, e);
  }
}

// B33 (b) and (c) through the loader.
TEST(LoaderTest, FieldCase_B33_DropLast) {
  TestDatasetOptions dso;
  dso.num_samples = 100;
  TestDataset hundred(dso);
  ASSERT_TRUE(hundred.ok());
  LoaderOptions o = Opts(32, 2, 2, true, 1);
  o.drop_last = true;
  std::unique_ptr<Loader> loader = MustOpen(hundred, o);
  ASSERT_NE(loader, nullptr);
  EXPECT_EQ(loader->batches_per_epoch(), 3u);
  for (uint64_t e = 0; e < 3; ++e) {
    const std::vector<Got> epoch = ReadEpoch(*loader);
    ASSERT_EQ(epoch.size(), 3u);
    std::set<uint64_t> ids;
    for (const Got& g : epoch) {
      EXPECT_EQ(g.ids.size(), 32u);
      ids.insert(g.ids.begin(), g.ids.end());
      ExpectKnownContent(g, hundred.schema());
    }
    EXPECT_EQ(ids.size(), 96u);
  }

  dso.num_samples = 10;
  TestDataset ten(dso);
  ASSERT_TRUE(ten.ok());
  LoaderOptions keep = Opts(32, 2, 2, false);
  std::unique_ptr<Loader> kept = MustOpen(ten, keep);
  ASSERT_NE(kept, nullptr);
  const std::vector<Got> one = ReadEpoch(*kept);
  ASSERT_EQ(one.size(), 1u);
  EXPECT_EQ(one[0].ids.size(), 10u);
  ExpectCompleteEpoch(one, ten, keep, 0);
}

// B33 (c): 10 samples, batch 32, drop_last: no batches, no hang, and a warning, even when
// another warning (pinned memory unavailable) was printed before in the process.
// A part of a partitioned pack opened as if it were the dataset: read as it is, with a warning
// that names the part (the user may have meant the merged dataset); a whole dataset, and a
// manifest whose partition record is malformed, give no such warning.
TEST(LoaderTest, OpeningOnePartOfAPartitionedPackWarns) {
  TestDatasetOptions dso;
  dso.num_samples = 12;
  TestDataset ds(dso);
  ASSERT_TRUE(ds.ok());
  auto open_and_read = [&](const std::string& source_json) {
    Result<Manifest> m = Manifest::Read(ds.dir());
    EXPECT_TRUE(m.ok()) << m.status().ToString();
    m->source_json = source_json;
    EXPECT_TRUE(m->Write(ds.dir()).ok());
    ::testing::internal::CaptureStderr();
    std::unique_ptr<Loader> loader = MustOpen(ds, Opts(4, 1));
    const std::string err = ::testing::internal::GetCapturedStderr();
    EXPECT_NE(loader, nullptr);
    uint64_t samples = 0;
    Batch b;
    while (loader != nullptr) {
      Result<bool> r = loader->Next(&b);
      EXPECT_TRUE(r.ok()) << r.status().ToString();
      if (!r.ok() || !*r) break;
      samples += b.size;
    }
    EXPECT_EQ(samples, 12u);
    return err;
  };
  EXPECT_EQ(open_and_read("{}").find("partitioned pack"), std::string::npos);
  EXPECT_EQ(open_and_read(R"({"partition": {"index": 3, "count": 2}})").find("partitioned pack"),
            std::string::npos);
  const std::string err =
      open_and_read(R"({"kind": "imagefolder", "partition": {"index": 1, "count": 4}})");
  EXPECT_NE(err.find(ds.dir() + " is part 1 of 4 of a partitioned pack"), std::string::npos) << err;
  EXPECT_NE(err.find("only that part's 12 samples"), std::string::npos) << err;
  EXPECT_NE(err.find("kiln merge"), std::string::npos) << err;
}

TEST(LoaderTest, FieldCase_B33_DropLastWithNoBatchesWarns) {
  TestDatasetOptions dso;
  dso.num_samples = 10;
  TestDataset ten(dso);
  ASSERT_TRUE(ten.ok());
  ::testing::internal::CaptureStderr();
  {
    LoaderOptions pinned = Opts(4, 1);
    pinned.pin_memory = true;  // without a GPU this warns that pinned memory is unavailable
    std::unique_ptr<Loader> unrelated = MustOpen(ten, pinned);
  }
  LoaderOptions o = Opts(32, 2, 2, false);
  o.drop_last = true;
  std::unique_ptr<Loader> loader = MustOpen(ten, o);
  const std::string err = ::testing::internal::GetCapturedStderr();
  ASSERT_NE(loader, nullptr);
  EXPECT_EQ(loader->batches_per_epoch(), 0u);
  EXPECT_EQ(loader->samples_per_epoch(), 0u);
  for (uint64_t e = 0; e < 3; ++e) {
    Batch b;
    Result<bool> r = loader->Next(&b);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_FALSE(*r) << "epoch " << e;
  }
  EXPECT_NE(err.find("no batches"), std::string::npos)
      << "expected a warning that the loader yields no batches; stderr was: " << err;
}

// ---------------------------------------------------------------------------------------------
// Ranks.

TEST(LoaderTest, RanksSplitTheDatasetUnderEveryTailPolicy) {
  TestDatasetOptions dso;
  dso.num_samples = 103;
  dso.samples_per_shard = 25;
  TestDataset ds(dso);
  ASSERT_TRUE(ds.ok());
  for (TailPolicy tail : {TailPolicy::kShort, TailPolicy::kDrop, TailPolicy::kPad}) {
    SCOPED_TRACE(static_cast<int>(tail));
    std::vector<int> seen(103, 0);
    uint64_t padded = 0, steps = UINT64_MAX;
    for (uint32_t r = 0; r < 4; ++r) {
      LoaderOptions o = Opts(10, 2, 2, true, 6);
      o.tail_policy = tail;
      o.rank = r;
      o.world_size = 4;
      std::unique_ptr<Loader> loader = MustOpen(ds, o);
      ASSERT_NE(loader, nullptr);
      if (steps == UINT64_MAX) steps = loader->batches_per_epoch();
      EXPECT_EQ(loader->batches_per_epoch(), steps) << "rank " << r;
      const std::vector<Got> epoch = ReadEpoch(*loader);
      ASSERT_EQ(epoch.size(), steps) << "rank " << r;
      const auto plan = SamplerPlan(103, o, 0);
      for (size_t b = 0; b < epoch.size(); ++b) {
        EXPECT_EQ(epoch[b].ids, plan[b]) << "rank " << r << " batch " << b;
        ExpectKnownContent(epoch[b], ds.schema());  // padding repeats real samples' bytes
        for (size_t k = 0; k < epoch[b].ids.size(); ++k) {
          if (epoch[b].padding[k]) {
            ++padded;
          } else {
            ++seen[epoch[b].ids[k]];
          }
        }
      }
    }
    uint64_t distinct = 0;
    for (int s : seen) {
      EXPECT_LE(s, 1);
      distinct += s;
    }
    EXPECT_EQ(distinct, tail == TailPolicy::kDrop ? 100u : 103u);
    EXPECT_EQ(padded, tail == TailPolicy::kPad ? 1u : 0u);
    EXPECT_EQ(steps, 3u);
  }
}

// B34 through the loader: 1001 samples, 4 ranks, batch 250.
TEST(LoaderTest, FieldCase_B34_EqualStepsAndFlaggedPadding) {
  TestDatasetOptions dso;
  dso.num_samples = 1001;
  dso.schema = MakeSchema(2, 2, 1);
  TestDataset ds(dso);
  ASSERT_TRUE(ds.ok());
  for (TailPolicy tail : {TailPolicy::kShort, TailPolicy::kPad, TailPolicy::kDrop}) {
    SCOPED_TRACE(static_cast<int>(tail));
    std::vector<std::unique_ptr<Loader>> ranks;
    for (uint32_t r = 0; r < 4; ++r) {
      LoaderOptions o = Opts(250, 2, 2, true, 3);
      o.tail_policy = tail;
      o.rank = r;
      o.world_size = 4;
      ranks.push_back(MustOpen(ds, o));
      ASSERT_NE(ranks.back(), nullptr);
    }
    // Known before the epoch starts, and equal on every rank.
    for (const auto& l : ranks) EXPECT_EQ(l->batches_per_epoch(), ranks[0]->batches_per_epoch());
    uint64_t total = 0, padded = 0;
    std::set<uint64_t> real;
    for (uint32_t r = 0; r < 4; ++r) {
      const std::vector<Got> epoch = ReadEpoch(*ranks[r]);
      EXPECT_EQ(epoch.size(), ranks[0]->batches_per_epoch());
      uint64_t count = 0;
      for (const Got& g : epoch) {
        count += g.ids.size();
        for (size_t k = 0; k < g.ids.size(); ++k) {
          if (g.padding[k]) {
            ++padded;
          } else {
            EXPECT_TRUE(real.insert(g.ids[k]).second);
          }
        }
      }
      if (tail == TailPolicy::kPad) {
        EXPECT_EQ(count, 251u) << "rank " << r;
      }
      if (tail == TailPolicy::kDrop) {
        EXPECT_EQ(count, 250u) << "rank " << r;
      }
      total += count;
    }
    if (tail == TailPolicy::kShort) {
      EXPECT_EQ(total, 1001u);
      EXPECT_EQ(real.size(), 1001u);
    } else if (tail == TailPolicy::kPad) {
      EXPECT_EQ(padded, 3u);
      EXPECT_EQ(real.size(), 1001u);
    } else {
      EXPECT_EQ(total, 1000u);
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Augmentation.

// Checks each sample against the reference crop/flip of its known bytes.
void ExpectAugmented(const Got& g, const TensorSchema& stored, const AugmentOptions& aug,
                     uint64_t seed, int* flipped) {
  Result<TensorSchema> out = AugmentedSchema(stored, aug);
  ASSERT_TRUE(out.ok());
  ASSERT_EQ(g.schema, *out);
  const uint64_t bytes = out->sample_bytes();
  for (size_t k = 0; k < g.ids.size(); ++k) {
    const AugmentParams p = DrawAugmentParams(stored, aug, seed, g.epoch, g.ids[k]);
    EXPECT_LE(p.top + out->height, stored.height);
    EXPECT_LE(p.left + out->width, stored.width);
    if (p.flip) ++*flipped;
    const std::vector<uint8_t> want =
        ReferenceAugment(SampleBytes(stored, g.ids[k]), stored, p, out->height, out->width);
    ASSERT_EQ(want.size(), bytes);
    EXPECT_EQ(std::memcmp(g.data.data() + k * bytes, want.data(), bytes), 0)
        << "sample " << g.ids[k] << " top " << p.top << " left " << p.left << " flip " << p.flip;
    EXPECT_EQ(g.labels[k], SampleLabel(g.ids[k]));
  }
}

TEST(LoaderTest, CropHasTheCropSchemaAndTheRightPixels) {
  for (Layout layout : {Layout::kHWC, Layout::kCHW}) {
    TestDatasetOptions dso;
    dso.num_samples = 64;
    dso.schema = MakeSchema(8, 8, 3, layout);
    TestDataset ds(dso);
    ASSERT_TRUE(ds.ok());
    LoaderOptions o = Opts(10, 2, 2, true, 17);
    o.augment.crop_height = 5;
    o.augment.crop_width = 6;
    std::unique_ptr<Loader> loader = MustOpen(ds, o);
    ASSERT_NE(loader, nullptr);
    EXPECT_EQ(loader->sample_schema(), MakeSchema(5, 6, 3, layout));
    std::set<std::pair<uint32_t, uint32_t>> corners;
    int flipped = 0;
    for (const Got& g : ReadEpoch(*loader)) {
      EXPECT_EQ(g.data.size(), g.ids.size() * 5 * 6 * 3);
      ExpectAugmented(g, ds.schema(), o.augment, o.seed, &flipped);
      for (uint64_t id : g.ids) {
        const AugmentParams p = DrawAugmentParams(ds.schema(), o.augment, o.seed, 0, id);
        corners.insert({p.top, p.left});
      }
    }
    EXPECT_EQ(flipped, 0);
    EXPECT_GT(corners.size(), 4u) << "crops should vary between samples";
  }
}

TEST(LoaderTest, FlipMirrorsTheKnownBytes) {
  for (DType dtype : {DType::kUint8, DType::kFloat32}) {
    for (Layout layout : {Layout::kHWC, Layout::kCHW}) {
      TestDatasetOptions dso;
      dso.num_samples = 200;
      dso.schema = MakeSchema(3, 5, 3, layout, dtype);
      TestDataset ds(dso);
      ASSERT_TRUE(ds.ok());
      LoaderOptions o = Opts(32, 2, 2, true, 23);
      o.augment.flip = true;
      std::unique_ptr<Loader> loader = MustOpen(ds, o);
      ASSERT_NE(loader, nullptr);
      EXPECT_EQ(loader->sample_schema(), ds.schema());
      int flipped = 0;
      for (const Got& g : ReadEpoch(*loader)) {
        ExpectAugmented(g, ds.schema(), o.augment, o.seed, &flipped);
        // A flipped sample differs from the stored one (its columns differ).
        for (size_t k = 0; k < g.ids.size(); ++k) {
          const AugmentParams p = DrawAugmentParams(ds.schema(), o.augment, o.seed, 0, g.ids[k]);
          const std::vector<uint8_t> stored = SampleBytes(ds.schema(), g.ids[k]);
          const bool same =
              std::memcmp(g.data.data() + k * stored.size(), stored.data(), stored.size()) == 0;
          EXPECT_EQ(same, !p.flip) << "sample " << g.ids[k];
        }
      }
      EXPECT_GT(flipped, 60) << "about half of 200 samples should be flipped";
      EXPECT_LT(flipped, 140);
    }
  }
}

TEST(LoaderTest, AugmentationIsDeterministicAcrossThreadsAndPrefetch) {
  TestDatasetOptions dso;
  dso.num_samples = 300;
  dso.schema = MakeSchema(10, 9, 3);
  dso.samples_per_shard = 40;
  TestDataset ds(dso);
  ASSERT_TRUE(ds.ok());
  std::vector<std::vector<uint8_t>> reference;
  for (uint32_t threads : {1u, 4u, 7u}) {
    for (uint32_t prefetch : {1u, 3u}) {
      LoaderOptions o = Opts(16, threads, prefetch, true, 31);
      o.augment.crop_height = 6;
      o.augment.crop_width = 7;
      o.augment.flip = true;
      std::unique_ptr<Loader> loader = MustOpen(ds, o);
      ASSERT_NE(loader, nullptr);
      std::vector<std::vector<uint8_t>> got;
      int flipped = 0;
      for (int e = 0; e < 2; ++e) {
        for (const Got& g : ReadEpoch(*loader)) {
          got.push_back(g.data);
          if (threads == 1 && prefetch == 1)
            ExpectAugmented(g, ds.schema(), o.augment, 31, &flipped);
        }
      }
      if (reference.empty()) {
        reference = got;
      } else {
        EXPECT_TRUE(got == reference) << "threads " << threads << " prefetch " << prefetch;
      }
    }
  }
  // The parameters of a sample change with the epoch.
  AugmentOptions aug;
  aug.crop_height = 6;
  aug.crop_width = 7;
  aug.flip = true;
  int differ = 0;
  for (uint64_t id = 0; id < 50; ++id) {
    const AugmentParams a = DrawAugmentParams(ds.schema(), aug, 31, 0, id);
    const AugmentParams b = DrawAugmentParams(ds.schema(), aug, 31, 1, id);
    differ += (a.top != b.top || a.left != b.left || a.flip != b.flip) ? 1 : 0;
  }
  EXPECT_GT(differ, 25);
}

// RandomResizedCrop in the loader: each sample is ApplyAugment of its stored bytes at
// DrawAugmentParams, byte-identical for any thread count and prefetch, a resumed loader serves
// the same batches, and a state saved with other scale/ratio bounds is refused.
TEST(LoaderTest, ResizedCropIsDeterministicAcrossThreadsAndResumesExactly) {
  TestDatasetOptions dso;
  dso.num_samples = 200;
  dso.schema = MakeSchema(20, 24, 3);
  dso.samples_per_shard = 32;
  TestDataset ds(dso);
  ASSERT_TRUE(ds.ok());
  auto options = [](uint32_t threads, uint32_t prefetch) {
    LoaderOptions o = Opts(16, threads, prefetch, true, 5);
    o.augment.resize_height = 12;
    o.augment.resize_width = 16;
    o.augment.flip = true;
    return o;
  };
  std::vector<std::vector<uint8_t>> reference;
  for (uint32_t threads : {1u, 4u}) {
    for (uint32_t prefetch : {1u, 3u}) {
      std::unique_ptr<Loader> loader = MustOpen(ds, options(threads, prefetch));
      ASSERT_NE(loader, nullptr);
      std::vector<std::vector<uint8_t>> got;
      for (int e = 0; e < 2; ++e) {
        for (const Got& g : ReadEpoch(*loader)) {
          ASSERT_EQ(g.schema.height, 12u);
          ASSERT_EQ(g.schema.width, 16u);
          got.push_back(g.data);
          if (reference.empty()) {
            const uint64_t bytes = g.schema.sample_bytes();
            for (size_t k = 0; k < g.ids.size(); ++k) {
              const AugmentParams p =
                  DrawAugmentParams(ds.schema(), options(1, 1).augment, 5, g.epoch, g.ids[k]);
              std::vector<uint8_t> want(bytes);
              ApplyAugment(SampleBytes(ds.schema(), g.ids[k]).data(), ds.schema(), p, g.schema,
                           want.data());
              ASSERT_EQ(std::memcmp(g.data.data() + k * bytes, want.data(), bytes), 0)
                  << "sample " << g.ids[k];
            }
          }
        }
      }
      if (reference.empty()) {
        reference = got;
      } else {
        EXPECT_TRUE(got == reference) << "threads " << threads << " prefetch " << prefetch;
      }
    }
  }
  const size_t per_epoch = reference.size() / 2;
  std::unique_ptr<Loader> first = MustOpen(ds, options(2, 2));
  ASSERT_NE(first, nullptr);
  for (int i = 0; i < 5; ++i) {
    Batch b;
    ASSERT_TRUE(*first->Next(&b));
  }
  const ReaderState saved = first->state();
  EXPECT_TRUE(saved.resized_crop);
  Result<ReaderState> decoded = ReaderState::Decode(saved.Encode());
  ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
  LoaderOptions resumed = options(3, 2);
  resumed.resume = *decoded;
  std::unique_ptr<Loader> second = MustOpen(ds, resumed);
  ASSERT_NE(second, nullptr);
  const std::vector<Got> rest = ReadEpoch(*second);
  ASSERT_EQ(rest.size(), per_epoch - 5);
  for (size_t i = 0; i < rest.size(); ++i) EXPECT_TRUE(rest[i].data == reference[5 + i]) << i;
  LoaderOptions other = options(1, 1);
  other.augment.scale_min = 0.5;
  other.resume = *decoded;
  Result<std::unique_ptr<Loader>> refused = Loader::Open(ds.dir(), other);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(refused.status().message().find("resized crop"), std::string::npos)
      << refused.status().message();
  // The interpolation is part of what a state records: a bilinear state does not resume by area.
  LoaderOptions area = options(1, 1);
  area.augment.interpolation = ResizeInterpolation::kArea;
  area.resume = *decoded;
  Result<std::unique_ptr<Loader>> area_refused = Loader::Open(ds.dir(), area);
  ASSERT_FALSE(area_refused.ok());
  EXPECT_EQ(area_refused.status().code(), StatusCode::kInvalidArgument);
}

TEST(LoaderTest, BadCropIsInvalidArgument) {
  TestDatasetOptions dso;
  dso.num_samples = 4;
  TestDataset ds(dso);  // 8x8x3
  ASSERT_TRUE(ds.ok());
  struct Case {
    uint32_t h, w;
    const char* why;
  };
  for (const Case& c : {Case{9, 8, "taller than stored"}, Case{8, 9, "wider than stored"},
                        Case{4, 0, "height only"}, Case{0, 4, "width only"}}) {
    LoaderOptions o = Opts(2, 1);
    o.augment.crop_height = c.h;
    o.augment.crop_width = c.w;
    Result<std::unique_ptr<Loader>> l = Loader::Open(ds.dir(), o);
    ASSERT_FALSE(l.ok()) << c.why;
    EXPECT_EQ(l.status().code(), StatusCode::kInvalidArgument) << c.why;
  }
  LoaderOptions whole = Opts(2, 1);
  whole.augment.crop_height = 8;
  whole.augment.crop_width = 8;
  std::unique_ptr<Loader> l = MustOpen(ds, whole);
  ASSERT_NE(l, nullptr);
  ExpectCompleteEpoch(ReadEpoch(*l), ds, whole, 0);  // a full-size crop is the identity
}

// ---------------------------------------------------------------------------------------------
// Errors.

TEST(LoaderTest, InvalidOptionsAreRejected) {
  TestDatasetOptions dso;
  dso.num_samples = 4;
  TestDataset ds(dso);
  ASSERT_TRUE(ds.ok());
  struct Case {
    LoaderOptions options;
    const char* why;
  };
  std::vector<Case> cases;
  LoaderOptions o = Opts(2, 1);
  o.prefetch = 0;
  cases.push_back({o, "prefetch 0"});
  o.prefetch = 65;
  cases.push_back({o, "prefetch 65"});
  o = Opts(2, 257);
  cases.push_back({o, "num_threads 257"});
  o = Opts(0, 1);
  cases.push_back({o, "batch_size 0"});
  o = Opts(2, 1);
  o.world_size = 0;
  cases.push_back({o, "world_size 0"});
  o = Opts(2, 1);
  o.world_size = 2;
  o.rank = 2;
  cases.push_back({o, "rank 2 of 2"});
  for (const Case& c : cases) {
    Result<std::unique_ptr<Loader>> l = Loader::Open(ds.dir(), c.options);
    ASSERT_FALSE(l.ok()) << c.why;
    EXPECT_EQ(l.status().code(), StatusCode::kInvalidArgument) << c.why;
  }
  EXPECT_EQ(Loader::Create(nullptr, Opts(2, 1)).status().code(), StatusCode::kInvalidArgument);
  Result<std::unique_ptr<Loader>> missing = Loader::Open(ds.dir() + "-missing", Opts(2, 1));
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  // The edges of the valid ranges.
  o = Opts(2, 1, 64);
  EXPECT_NE(MustOpen(ds, o), nullptr);
  o = Opts(2, 0);
  std::unique_ptr<Loader> hw = MustOpen(ds, o);
  ASSERT_NE(hw, nullptr);
  EXPECT_EQ(hw->num_threads(), std::max(1u, std::thread::hardware_concurrency()));
}

// Flips one byte inside a record's stored bytes in the shard file.
void CorruptRecord(const std::string& shard_path, uint64_t record) {
  uint64_t offset = 0;
  {
    Result<std::unique_ptr<ShardReader>> shard = ShardReader::Open(shard_path);
    ASSERT_TRUE(shard.ok()) << shard.status().ToString();
    const ShardIndexEntry e = (*shard)->entry(record);
    ASSERT_GT(e.stored_size, 20u);
    offset = e.offset + 17;
  }
  std::fstream f(shard_path, std::ios::in | std::ios::out | std::ios::binary);
  ASSERT_TRUE(f.good());
  f.seekg(static_cast<std::streamoff>(offset));
  char c = 0;
  f.read(&c, 1);
  c = static_cast<char>(c ^ 0x5A);
  f.seekp(static_cast<std::streamoff>(offset));
  f.write(&c, 1);
  f.close();
  ASSERT_FALSE(f.fail());
}

TEST(LoaderTest, CorruptRecordFailsItsBatchNamingShardAndRecordThenContinues) {
  TestDatasetOptions dso;
  dso.num_samples = 40;
  dso.samples_per_shard = 10;
  TestDataset ds(dso);
  ASSERT_TRUE(ds.ok());
  ASSERT_EQ(ds.manifest().files.size(), 4u);
  const std::string shard_path = ds.ShardPath(2);
  ASSERT_NO_FATAL_FAILURE(CorruptRecord(shard_path, 3));  // sample 23
  for (bool shuffle : {false, true}) {
    for (uint32_t threads : {1u, 4u}) {
      SCOPED_TRACE("shuffle " + std::to_string(shuffle) + " threads " + std::to_string(threads));
      const LoaderOptions o = Opts(5, threads, 2, shuffle, 2);
      std::unique_ptr<Loader> loader = MustOpen(ds, o);
      ASSERT_NE(loader, nullptr);
      for (uint64_t e = 0; e < 2; ++e) {
        const auto plan = SamplerPlan(40, o, e);
        ASSERT_EQ(plan.size(), 8u);
        uint64_t bad = UINT64_MAX;
        for (uint64_t b = 0; b < plan.size(); ++b) {
          if (std::find(plan[b].begin(), plan[b].end(), 23u) != plan[b].end()) bad = b;
        }
        for (uint64_t b = 0; b < plan.size(); ++b) {
          Batch batch;
          Result<bool> r = loader->Next(&batch);
          if (b == bad) {
            ASSERT_FALSE(r.ok()) << "batch " << b << " holds the corrupt sample 23";
            EXPECT_EQ(r.status().code(), StatusCode::kCorruption);
            const std::string& msg = r.status().message();
            EXPECT_NE(msg.find(shard_path), std::string::npos) << msg;
            EXPECT_NE(msg.find("record 3"), std::string::npos) << msg;
            EXPECT_NE(msg.find("offset"), std::string::npos) << msg;
            continue;
          }
          ASSERT_TRUE(r.ok()) << "batch " << b << ": " << r.status().ToString();
          ASSERT_TRUE(*r) << "batch " << b;
          const Got g = Copy(batch);
          EXPECT_EQ(g.index, b);
          EXPECT_EQ(g.ids, plan[b]);
          ExpectKnownContent(g, ds.schema());
        }
        Batch end;
        Result<bool> r = loader->Next(&end);
        ASSERT_TRUE(r.ok()) << r.status().ToString();
        EXPECT_FALSE(*r);
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Flow control and lifetime.

TEST(LoaderTest, SlowConsumerStillGetsEverything) {
  TestDatasetOptions dso;
  dso.num_samples = 240;
  dso.samples_per_shard = 50;
  TestDataset ds(dso);
  ASSERT_TRUE(ds.ok());
  const LoaderOptions o = Opts(8, 2, 2, true, 13);
  std::unique_ptr<Loader> loader = MustOpen(ds, o);
  ASSERT_NE(loader, nullptr);
  std::vector<Got> epoch;
  for (;;) {
    Batch b;
    Result<bool> r = loader->Next(&b);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    if (!*r) break;
    // Fetch threads run ahead while the consumer holds the batch; its bytes must not change.
    const Got before = Copy(b);
    std::this_thread::sleep_for(std::chrono::milliseconds(3));
    const Got after = Copy(b);
    EXPECT_EQ(before.data, after.data) << "batch " << b.index << " changed while held";
    EXPECT_EQ(before.ids, after.ids);
    epoch.push_back(after);
    ASSERT_LE(epoch.size(), 30u);
  }
  ExpectCompleteEpoch(epoch, ds, o, 0);
  EXPECT_EQ(loader->stats().samples, 240u);
}

TEST(LoaderTest, DestroyingMidEpochDoesNotHang) {
  TestDatasetOptions dso;
  dso.num_samples = 500;
  dso.samples_per_shard = 100;
  TestDataset ds(dso);
  ASSERT_TRUE(ds.ok());
  auto destroy_after = [&](int batches, uint32_t threads, uint32_t prefetch, bool set_epoch) {
    Result<std::unique_ptr<Loader>> l = Loader::Open(ds.dir(), Opts(4, threads, prefetch));
    if (!l.ok()) return false;
    std::shared_ptr<Loader> loader(std::move(l).value());
    for (int i = 0; i < batches; ++i) {
      Batch b;
      if (!loader->Next(&b).ok()) return false;
    }
    if (set_epoch) loader->SetEpoch(3);
    return FinishesWithin([loader]() mutable { loader.reset(); }, std::chrono::seconds(10));
  };
  EXPECT_TRUE(destroy_after(0, 4, 8, false)) << "right after Create";
  EXPECT_TRUE(destroy_after(1, 4, 8, false)) << "holding the first batch";
  EXPECT_TRUE(destroy_after(20, 1, 1, false)) << "mid-epoch, one thread";
  EXPECT_TRUE(destroy_after(5, 7, 64, true)) << "right after SetEpoch";
  EXPECT_TRUE(destroy_after(126, 3, 2, false)) << "after the end of the epoch";
}

// ---------------------------------------------------------------------------------------------
// Host memory.

TEST(LoaderTest, HostBufferFallsBackToPageAlignedMemoryWithoutGpu) {
  std::string reason;
  const bool gpu = CudaDeviceAvailable(&reason);
  Result<std::unique_ptr<HostBuffer>> pinned = HostBuffer::Allocate(10000, true);
  ASSERT_TRUE(pinned.ok()) << pinned.status().ToString();
  EXPECT_EQ((*pinned)->size(), 12288u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>((*pinned)->data()) % 4096, 0u);
  std::memset((*pinned)->data(), 0xAB, (*pinned)->size());
  if (gpu) {
    EXPECT_TRUE((*pinned)->pinned());
    EXPECT_TRUE((*pinned)->fallback_reason().empty());
  } else {
    EXPECT_FALSE((*pinned)->pinned());
    EXPECT_FALSE((*pinned)->fallback_reason().empty());
    EXPECT_FALSE(reason.empty());
  }
  Result<std::unique_ptr<HostBuffer>> plain = HostBuffer::Allocate(1, false);
  ASSERT_TRUE(plain.ok());
  EXPECT_FALSE((*plain)->pinned());
  EXPECT_TRUE((*plain)->fallback_reason().empty());
  EXPECT_EQ((*plain)->size(), 4096u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>((*plain)->data()) % 4096, 0u);

  // Through the loader: slots are pinned only with a GPU, and each batch starts on a page.
  TestDatasetOptions dso;
  dso.num_samples = 30;
  TestDataset ds(dso);
  ASSERT_TRUE(ds.ok());
  LoaderOptions o = Opts(7, 2, 3);
  o.pin_memory = true;
  std::unique_ptr<Loader> loader = MustOpen(ds, o);
  ASSERT_NE(loader, nullptr);
  EXPECT_EQ(loader->pinned(), gpu);
  for (;;) {
    Batch b;
    Result<bool> r = loader->Next(&b);
    ASSERT_TRUE(r.ok());
    if (!*r) break;
    EXPECT_EQ(b.pinned, gpu);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(b.data) % 4096, 0u) << "batch " << b.index;
    EXPECT_EQ(reinterpret_cast<uintptr_t>(b.labels) % alignof(int64_t), 0u);
  }
}

// ---------------------------------------------------------------------------------------------
// B06: a 4-sample dataset of 8x8x3 uint8 yields one batch of 4 with a uniform shape.

TEST(LoaderTest, FieldCase_B06_ReaderUniformBatch) {
  TestDatasetOptions dso;
  dso.num_samples = 4;
  dso.schema = MakeSchema(8, 8, 3);
  TestDataset ds(dso);
  ASSERT_TRUE(ds.ok());
  for (uint32_t batch_size : {4u, 256u}) {
    const LoaderOptions o = Opts(batch_size, 2, 2, true, 0);
    std::unique_ptr<Loader> loader = MustOpen(ds, o);
    ASSERT_NE(loader, nullptr);
    const std::vector<Got> epoch = ReadEpoch(*loader);
    ASSERT_EQ(epoch.size(), 1u) << "batch size " << batch_size;
    EXPECT_EQ(epoch[0].ids.size(), 4u);
    EXPECT_EQ(epoch[0].schema, MakeSchema(8, 8, 3));
    EXPECT_EQ(epoch[0].data.size(), 4u * 8 * 8 * 3);
    ExpectCompleteEpoch(epoch, ds, o, 0);
  }
}

}  // namespace
}  // namespace kiln

// ---------------------------------------------------------------------------------------------
// Block order's memory fit on the mmap path (BlockMemoryFit) and the interruptible wait.

namespace kiln {
namespace {

// The numbers of a 96 MiB cgroup reading a 264 MiB dataset of 96x96x3 samples in block order
// with the defaults (4 MiB blocks, window 16, 16 MiB read-ahead, 3 slots of 256 samples).
BlockMemoryFit TrialFit() {
  BlockMemoryFit fit;
  fit.block_bytes = uint64_t{4} << 20;
  fit.window_blocks = 16;
  fit.read_ahead_bytes = uint64_t{16} << 20;
  fit.slot_bytes = uint64_t{21} << 20;
  fit.memory_limit_bytes = uint64_t{96} << 20;
  return fit;
}

TEST(BlockMemoryFitTest, AWindowLargerThanTheLimitWarnsWithTheRuleAndTheNumbers) {
  const BlockMemoryFit fit = TrialFit();
  EXPECT_EQ(fit.window_bytes(), uint64_t{64} << 20);
  EXPECT_EQ(fit.needed_bytes(), uint64_t{101} << 20);
  EXPECT_FALSE(fit.fits());
  const std::string w = BlockMemoryFitWarning(fit);
  // The README's rule, quoted, then the numbers and the cures.
  EXPECT_NE(w.find("block_bytes x window + read_ahead_bytes"), std::string::npos) << w;
  EXPECT_NE(w.find("4.0 MiB x 16 + 16.0 MiB + 21.0 MiB of slots = 101.0 MiB > the memory limit "
                   "of 96.0 MiB"),
            std::string::npos)
      << w;
  // (96 - 16 - 21) / 4 = 14 blocks fit.
  EXPECT_NE(w.find("shuffle_window 14 or less; kiln bench --window"), std::string::npos) << w;
  EXPECT_NE(w.find("--io direct"), std::string::npos) << w;
  EXPECT_NE(w.find("larger blocks make it worse"), std::string::npos) << w;
}

TEST(BlockMemoryFitTest, ASmallEnoughWindowOrNoKnownLimitFits) {
  BlockMemoryFit fit = TrialFit();
  fit.window_blocks = 4;  // 16 + 16 + 21 = 53 MiB
  EXPECT_TRUE(fit.fits());
  EXPECT_EQ(BlockMemoryFitWarning(fit), "");
  fit.window_blocks = 14;  // exactly 77 MiB of 96: fits
  EXPECT_TRUE(fit.fits());
  fit = TrialFit();
  fit.memory_limit_bytes = 0;
  EXPECT_TRUE(fit.fits());
  // Read-ahead and slots alone over the limit: no window fits, so smaller blocks and less
  // read-ahead are advised.
  fit = TrialFit();
  fit.memory_limit_bytes = uint64_t{32} << 20;
  const std::string w = BlockMemoryFitWarning(fit);
  EXPECT_NE(w.find("less read-ahead"), std::string::npos) << w;
}

TEST(BlockMemoryFitTest, TheLoaderComputesItForBlockOrderThroughTheMappings) {
  TestDatasetOptions to;
  to.num_samples = 2000;
  to.schema = MakeSchema(16, 16, 3);  // 768-byte samples
  TestDataset ds(to);
  ASSERT_TRUE(ds.ok());
  LoaderOptions o = Opts(50, 1, 2, false);
  o.shuffle = ShuffleMode::kBlock;
  o.block_bytes = 16 << 10;  // 21 samples
  o.shuffle_window = 4;
  o.io = IoMode::kMmap;
  Result<std::unique_ptr<Loader>> loader = Loader::Create(ds.Open(), o);
  ASSERT_TRUE(loader.ok()) << loader.status().ToString();
  const std::optional<BlockMemoryFit>& fit = (*loader)->block_memory_fit();
  ASSERT_TRUE(fit.has_value());
  EXPECT_EQ(fit->block_bytes, uint64_t{21} * 768);
  EXPECT_EQ(fit->window_blocks, 4u);
  EXPECT_EQ(fit->read_ahead_bytes, o.read_ahead_bytes);
  EXPECT_GE(fit->slot_bytes, uint64_t{3} * 50 * 768);  // prefetch + 1 slots of 50 samples
  EXPECT_EQ(fit->memory_limit_bytes, MemoryLimitBytes());
  o.shuffle = ShuffleMode::kExact;
  Result<std::unique_ptr<Loader>> exact = Loader::Create(ds.Open(), o);
  ASSERT_TRUE(exact.ok());
  EXPECT_FALSE((*exact)->block_memory_fit().has_value());
}

TEST(LoaderInterruptTest, AnInterruptedWaitReturnsCancelledAndTheBatchStaysNext) {
  TestDatasetOptions to;
  to.num_samples = 2000;
  to.schema = MakeSchema(64, 64, 3);  // 12 KiB samples: a 24 MiB batch for one thread
  TestDataset ds(to);
  ASSERT_TRUE(ds.ok());
  Result<std::unique_ptr<Loader>> loader = Loader::Create(ds.Open(), Opts(2000, 1, 1, false));
  ASSERT_TRUE(loader.ok()) << loader.status().ToString();
  int calls = 0;
  Batch b;
  Result<bool> r = (*loader)->Next(
      &b,
      [&] {
        ++calls;
        return true;
      },
      1);
  if (!r.ok()) {
    // The usual outcome: the batch takes far longer than the 1 ms poll.
    EXPECT_EQ(r.status().code(), StatusCode::kCancelled);
    EXPECT_NE(r.status().message().find("interrupted while waiting for batch 0 of epoch 0"),
              std::string::npos)
        << r.status().ToString();
    EXPECT_EQ(calls, 1);
    r = (*loader)->Next(&b);
  }
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_TRUE(*r);
  EXPECT_EQ(b.index, 0u);
  ASSERT_EQ(b.size, 2000u);
  for (uint64_t i = 0; i < b.size; i += 997) {
    EXPECT_EQ(b.sample_indices[i], i);
    EXPECT_EQ(std::memcmp(b.data + i * to.schema.sample_bytes(), SampleBytes(to.schema, i).data(),
                          to.schema.sample_bytes()),
              0);
  }
  Result<bool> end = (*loader)->Next(&b, [] { return true; });
  ASSERT_TRUE(end.ok());
  EXPECT_FALSE(*end);  // one batch per epoch: the interrupt did not cost the epoch a batch
}

}  // namespace
}  // namespace kiln
