// Checkpoint and resume of kiln::Loader (reader/loader.h, "Checkpoint and resume"): a property
// test comparing stopped, saved and restored runs byte for byte with uninterrupted ones, elastic
// restores on other world sizes, field case B50, the refusals, and SetEpoch/start_epoch.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "reader/loader.h"
#include "reader/reader_state.h"
#include "tests/reader/test_dataset.h"

namespace kiln {
namespace {

using testing::MakeSchema;
using testing::TestDataset;
using testing::TestDatasetOptions;

// One event of a loader's stream: a batch (all of it, copied), or the end of an epoch.
struct Event {
  bool end = false;
  uint64_t epoch = 0;
  uint64_t index = 0;
  std::vector<uint64_t> ids;
  std::vector<int64_t> labels;
  std::vector<uint8_t> padding;
  std::vector<uint8_t> data;
  bool operator==(const Event& o) const {
    return end == o.end && epoch == o.epoch && index == o.index && ids == o.ids &&
           labels == o.labels && padding == o.padding && data == o.data;
  }
};

std::string Describe(const Event& e) {
  if (e.end) return "end of epoch";
  std::string s =
      "epoch " + std::to_string(e.epoch) + " batch " + std::to_string(e.index) + " ids [";
  for (uint64_t id : e.ids) s += std::to_string(id) + " ";
  return s + "]";
}

// Reads `count` events from `loader`.
std::vector<Event> ReadEvents(Loader& loader, uint64_t count) {
  std::vector<Event> out;
  for (uint64_t i = 0; i < count; ++i) {
    Batch b;
    Result<bool> r = loader.Next(&b);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    if (!r.ok()) return out;
    Event e;
    e.end = !*r;
    if (*r) {
      e.epoch = b.epoch;
      e.index = b.index;
      e.ids.assign(b.sample_indices, b.sample_indices + b.size);
      e.labels.assign(b.labels, b.labels + b.size);
      e.padding.assign(b.is_padding, b.is_padding + b.size);
      e.data.assign(b.data, b.data + b.bytes());
    }
    out.push_back(std::move(e));
  }
  return out;
}

std::unique_ptr<Loader> MustCreate(std::shared_ptr<const Dataset> ds, const LoaderOptions& o) {
  Result<std::unique_ptr<Loader>> l = Loader::Create(std::move(ds), o);
  EXPECT_TRUE(l.ok()) << l.status().ToString();
  if (!l.ok()) return nullptr;
  return std::move(l).value();
}

// Saves `loader`'s state through its binary form, as a checkpoint would.
ReaderState SaveAndLoad(const Loader& loader) {
  const std::string blob = loader.state().Encode();
  EXPECT_LE(blob.size(), 256u);
  Result<ReaderState> back = ReaderState::Decode(blob);
  EXPECT_TRUE(back.ok()) << back.status().ToString();
  return back.ok() ? *back : ReaderState{};
}

// ---------------------------------------------------------------------------------------------
// The property test.

class LoaderResumeProperty : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const uint64_t sizes[] = {1, 5, 17, 40, 64, 97};
    for (uint64_t n : sizes) {
      TestDatasetOptions o;
      o.num_samples = n;
      o.schema = MakeSchema(6, 5, 3);
      o.samples_per_shard = n > 13 ? 13 : 0;
      auto ds = std::make_unique<TestDataset>(o);
      ASSERT_TRUE(ds->ok());
      datasets_->push_back(std::move(ds));
    }
  }
  static void TearDownTestSuite() { datasets_->clear(); }
  static std::vector<std::unique_ptr<TestDataset>>* datasets_;
};
std::vector<std::unique_ptr<TestDataset>>* LoaderResumeProperty::datasets_ =
    new std::vector<std::unique_ptr<TestDataset>>();

// 1,200 random cases of (dataset size, batch size, world size and rank, tail policy, drop_last,
// read order with block size and window, crop/flip, epoch, stop positions, threads, prefetch):
// each run is stopped, its state saved through the binary form, restored in a new loader
// (sometimes with other thread counts and prefetch depths, sometimes stopped and restored a
// second time), and the whole stream (two epochs, ends of epochs included) must equal the
// uninterrupted run's, byte for byte: data, labels, indices, padding flags, batch numbers.
TEST_F(LoaderResumeProperty, RestoredStreamEqualsUninterruptedStream) {
  std::mt19937_64 rng(20261201);
  auto pick = [&](uint64_t lo, uint64_t hi) {  // uniform in [lo, hi]
    return std::uniform_int_distribution<uint64_t>(lo, hi)(rng);
  };
  const TailPolicy kTails[] = {TailPolicy::kShort, TailPolicy::kDrop, TailPolicy::kPad};
  const ShuffleMode kModes[] = {ShuffleMode::kNone, ShuffleMode::kExact, ShuffleMode::kBlock};
  int failures = 0, twice = 0, other_threads = 0, at_end = 0;
  constexpr int kCases = 1200;
  for (int c = 0; c < kCases && failures < 5; ++c) {
    const TestDataset& tds = *(*datasets_)[pick(0, datasets_->size() - 1)];
    std::shared_ptr<const Dataset> ds = tds.Open();
    ASSERT_NE(ds, nullptr);
    LoaderOptions o;
    o.pin_memory = false;
    o.batch_size = static_cast<uint32_t>(pick(1, 9));
    o.world_size = static_cast<uint32_t>(pick(1, 4));
    o.rank = static_cast<uint32_t>(pick(0, o.world_size - 1));
    o.tail_policy = kTails[pick(0, 2)];
    o.drop_last = pick(0, 3) == 0;
    o.shuffle = kModes[pick(0, 2)];
    o.block_bytes = tds.schema().sample_bytes() * pick(1, 12) + pick(0, 89);
    o.shuffle_window = static_cast<uint32_t>(pick(1, 5));
    o.seed = pick(0, 3);
    if (pick(0, 1)) {
      o.augment.crop_height = 4;
      o.augment.crop_width = 3;
    }
    o.augment.flip = pick(0, 1) == 1;
    o.start_epoch = pick(0, 3);
    o.num_threads = static_cast<uint32_t>(pick(1, 3));
    o.prefetch = static_cast<uint32_t>(pick(1, 3));
    const std::string what =
        "case " + std::to_string(c) + ": N=" + std::to_string(tds.num_samples()) +
        " B=" + std::to_string(o.batch_size) + " W=" + std::to_string(o.world_size) +
        " rank=" + std::to_string(o.rank) +
        " tail=" + std::to_string(static_cast<int>(o.tail_policy)) +
        " drop_last=" + std::to_string(o.drop_last) + " shuffle=" + ShuffleModeName(o.shuffle) +
        " block_bytes=" + std::to_string(o.block_bytes) +
        " window=" + std::to_string(o.shuffle_window) +
        " crop=" + std::to_string(o.augment.crop_height) +
        " flip=" + std::to_string(o.augment.flip) + " epoch=" + std::to_string(o.start_epoch);

    std::unique_ptr<Loader> whole = MustCreate(ds, o);
    ASSERT_NE(whole, nullptr) << what;
    const uint64_t bpe = whole->batches_per_epoch();
    const uint64_t total = 2 * (bpe + 1);  // two epochs, each ending with an end event
    const std::vector<Event> want = ReadEvents(*whole, total);
    whole.reset();

    // Stop after k1 events, and (one case in three) again after k2 more.
    std::vector<uint64_t> stops = {pick(0, total)};
    if (pick(0, 2) == 0) stops.push_back(pick(stops[0], total));
    twice += stops.size() == 2;
    at_end += stops[0] == bpe || stops[0] == bpe + 1;
    std::vector<Event> got;
    LoaderOptions current = o;
    std::unique_ptr<Loader> loader = MustCreate(ds, current);
    ASSERT_NE(loader, nullptr) << what;
    uint64_t read = 0;
    for (uint64_t stop : stops) {
      std::vector<Event> part = ReadEvents(*loader, stop - read);
      got.insert(got.end(), part.begin(), part.end());
      read = stop;
      const ReaderState state = SaveAndLoad(*loader);
      loader.reset();
      current.resume = state;
      current.start_epoch = 0;
      if (pick(0, 1)) {
        current.num_threads = static_cast<uint32_t>(pick(1, 4));
        current.prefetch = static_cast<uint32_t>(pick(1, 4));
        ++other_threads;
      }
      loader = MustCreate(ds, current);
      ASSERT_NE(loader, nullptr) << what << " restoring " << state.ToString();
    }
    std::vector<Event> rest = ReadEvents(*loader, total - read);
    got.insert(got.end(), rest.begin(), rest.end());
    bool same = got.size() == want.size();
    size_t first_diff = 0;
    while (same && first_diff < got.size() && got[first_diff] == want[first_diff]) ++first_diff;
    same = same && first_diff == got.size();
    if (!same) {
      ++failures;
      ADD_FAILURE() << what << " stops " << stops[0] << (stops.size() > 1 ? "," : "")
                    << (stops.size() > 1 ? std::to_string(stops[1]) : "") << ": event "
                    << first_diff << " differs: got "
                    << (first_diff < got.size() ? Describe(got[first_diff]) : "nothing")
                    << ", want "
                    << (first_diff < want.size() ? Describe(want[first_diff]) : "nothing");
    }
  }
  // The generator covers what the test claims.
  EXPECT_GT(twice, 200);
  EXPECT_GT(other_threads, 400);
  EXPECT_GT(at_end, 50);
}

// ---------------------------------------------------------------------------------------------
// Elastic restores.

struct RankRun {
  std::vector<uint64_t> real;  // non-padding sample indices read
  uint64_t padded = 0;
  uint64_t batches = 0;
};

// Reads up to `steps` batches (or to the end of the epoch) on `loader`.
RankRun ReadSteps(Loader& loader, uint64_t steps) {
  RankRun run;
  for (uint64_t i = 0; i < steps; ++i) {
    Batch b;
    Result<bool> r = loader.Next(&b);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    if (!r.ok() || !*r) break;
    ++run.batches;
    for (uint32_t k = 0; k < b.size; ++k) {
      if (b.is_padding[k]) {
        ++run.padded;
      } else {
        run.real.push_back(b.sample_indices[k]);
      }
    }
  }
  return run;
}

// Saves after `steps` steps on `world` ranks of batch `batch`, restores on `world2` ranks of
// batch `batch2`, reads the rest of the epoch; returns how often each sample was read (real
// reads only) and checks the ranks' states agree and their batch counts are equal.
std::vector<int> ElasticEpoch(std::shared_ptr<const Dataset> ds, LoaderOptions o, uint32_t world,
                              uint32_t batch, uint64_t steps, uint32_t world2, uint32_t batch2,
                              uint64_t* padded = nullptr) {
  std::vector<int> seen(ds->num_samples(), 0);
  o.world_size = world;
  o.batch_size = batch;
  std::string blob;
  for (uint32_t r = 0; r < world; ++r) {
    o.rank = r;
    std::unique_ptr<Loader> loader = MustCreate(ds, o);
    if (loader == nullptr) return seen;
    const RankRun run = ReadSteps(*loader, steps);
    for (uint64_t id : run.real) ++seen[id];
    const std::string state = loader->state().Encode();
    if (r == 0) blob = state;
    EXPECT_EQ(state, blob) << "rank " << r << " reports another state than rank 0";
  }
  Result<ReaderState> state = ReaderState::Decode(blob);
  EXPECT_TRUE(state.ok());
  o.world_size = world2;
  o.batch_size = batch2;
  o.resume = *state;
  uint64_t batches = UINT64_MAX;
  for (uint32_t r = 0; r < world2; ++r) {
    o.rank = r;
    std::unique_ptr<Loader> loader = MustCreate(ds, o);
    if (loader == nullptr) return seen;
    const RankRun run = ReadSteps(*loader, UINT64_MAX);
    if (batches == UINT64_MAX) batches = run.batches;
    EXPECT_EQ(run.batches, batches) << "rank " << r << " of " << world2;
    EXPECT_EQ(run.batches, loader->batches_in_epoch());
    for (uint64_t id : run.real) ++seen[id];
    if (padded != nullptr) *padded += run.padded;
  }
  return seen;
}

TEST(LoaderResumeTest, ElasticFromEightRanksToOneTwoFourSixteen) {
  TestDatasetOptions dso;
  dso.num_samples = 1000;
  dso.samples_per_shard = 64;
  TestDataset tds(dso);
  ASSERT_TRUE(tds.ok());
  std::shared_ptr<const Dataset> ds = tds.Open();
  LoaderOptions o;
  o.pin_memory = false;
  o.num_threads = 2;
  o.seed = 17;
  o.start_epoch = 2;
  for (ShuffleMode mode : {ShuffleMode::kExact, ShuffleMode::kNone}) {
    o.shuffle = mode;
    for (uint32_t world2 : {1u, 2u, 4u, 16u}) {
      // Batch 8 on 8 ranks for 5 steps: 320 samples consumed; restored with batch 16 (B W
      // divides 320 only for W' <= 2) and batch 5 (never a multiple of 64).
      for (uint32_t batch2 : {16u, 5u}) {
        const std::vector<int> seen = ElasticEpoch(ds, o, 8, 8, 5, world2, batch2);
        for (uint64_t i = 0; i < 1000; ++i) {
          ASSERT_EQ(seen[i], 1) << ShuffleModeName(mode) << " W'=" << world2 << " B'=" << batch2
                                << " sample " << i;
        }
      }
    }
  }
  // kPad on the restored ranks: every sample once, plus flagged padding up to a multiple of W'.
  o.shuffle = ShuffleMode::kExact;
  o.tail_policy = TailPolicy::kPad;
  uint64_t padded = 0;
  const std::vector<int> seen = ElasticEpoch(ds, o, 8, 8, 5, 16, 7, &padded);
  for (uint64_t i = 0; i < 1000; ++i) ASSERT_EQ(seen[i], 1) << "pad, sample " << i;
  EXPECT_EQ(padded, (1000 - 320 + 15) / 16 * 16 - (1000 - 320));
}

// With the same world size and batch size, a restore is the uninterrupted run on every rank.
TEST(LoaderResumeTest, SameWorldSizeRestoreIsByteIdenticalOnEveryRank) {
  TestDatasetOptions dso;
  dso.num_samples = 300;
  TestDataset tds(dso);
  ASSERT_TRUE(tds.ok());
  std::shared_ptr<const Dataset> ds = tds.Open();
  for (ShuffleMode mode : {ShuffleMode::kExact, ShuffleMode::kBlock}) {
    for (uint32_t r = 0; r < 4; ++r) {
      LoaderOptions o;
      o.pin_memory = false;
      o.shuffle = mode;
      o.block_bytes = 7 * tds.schema().sample_bytes();
      o.shuffle_window = 3;
      o.batch_size = 6;
      o.world_size = 4;
      o.rank = r;
      o.num_threads = 2;
      o.augment.flip = true;
      std::unique_ptr<Loader> whole = MustCreate(ds, o);
      const std::vector<Event> want = ReadEvents(*whole, 2 * (whole->batches_per_epoch() + 1));
      std::unique_ptr<Loader> first = MustCreate(ds, o);
      std::vector<Event> got = ReadEvents(*first, 5);
      o.resume = SaveAndLoad(*first);
      o.num_threads = 3;
      std::unique_ptr<Loader> second = MustCreate(ds, o);
      std::vector<Event> rest = ReadEvents(*second, want.size() - 5);
      got.insert(got.end(), rest.begin(), rest.end());
      ASSERT_EQ(got.size(), want.size());
      for (size_t i = 0; i < got.size(); ++i) {
        EXPECT_TRUE(got[i] == want[i]) << ShuffleModeName(mode) << " rank " << r << " event " << i;
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Field case B50: 100 samples, batch 8; stop after 5 steps on 4 ranks, save, restore on 4, 2
// and 1 ranks; also stop on the last batch and on an empty last batch. With 100 samples on 4
// ranks an epoch has 4 steps (25 samples per rank: 8, 8, 8, 1), so the 5th step is the first
// of the next epoch; the empty last batch needs uneven shares, so that part uses 97 samples
// (25, 24, 24, 24: ranks 1-3 get an empty 4th batch).

// Reads `steps` steps of every one of `world` ranks (crossing into the next epoch through the
// end event), saves, restores on `world2` ranks, and reads to the end of the epoch the state
// is in. Returns per epoch how often each sample was read, and the stream of rank 0 after the
// restore when world2 == world (for the byte-identical check).
struct B50Result {
  std::map<uint64_t, std::vector<int>> seen;  // epoch -> per sample count
  std::vector<std::vector<Event>> after;      // per restored rank: events after the restore
  uint64_t state_epoch = 0;
};

B50Result RunB50(std::shared_ptr<const Dataset> ds, uint64_t steps, uint32_t world, uint32_t world2,
                 bool read_end_event) {
  B50Result out;
  const uint64_t n = ds->num_samples();
  LoaderOptions o;
  o.pin_memory = false;
  o.batch_size = 8;
  o.world_size = world;
  o.num_threads = 2;
  o.seed = 50;
  std::string blob;
  for (uint32_t r = 0; r < world; ++r) {
    o.rank = r;
    std::unique_ptr<Loader> loader = MustCreate(ds, o);
    uint64_t done = 0;
    while (done < steps) {
      Batch b;
      Result<bool> got = loader->Next(&b);
      EXPECT_TRUE(got.ok());
      if (!*got) continue;  // the end of epoch 0: the next call starts epoch 1
      ++done;
      auto& seen = out.seen[b.epoch];
      seen.resize(n);
      for (uint32_t k = 0; k < b.size; ++k) ++seen[b.sample_indices[k]];
    }
    if (read_end_event) {  // the step after the last batch: Next() reports the end
      Batch b;
      Result<bool> got = loader->Next(&b);
      EXPECT_TRUE(got.ok());
      EXPECT_FALSE(*got);
    }
    if (r == 0) blob = loader->state().Encode();
    EXPECT_EQ(loader->state().Encode(), blob);
  }
  Result<ReaderState> state = ReaderState::Decode(blob);
  EXPECT_TRUE(state.ok());
  out.state_epoch = state->epoch;
  o.world_size = world2;
  o.resume = *state;
  for (uint32_t r = 0; r < world2; ++r) {
    o.rank = r;
    std::unique_ptr<Loader> loader = MustCreate(ds, o);
    std::vector<Event> events;
    while (true) {
      std::vector<Event> e = ReadEvents(*loader, 1);
      if (e.empty()) break;
      events.push_back(e[0]);
      if (e[0].end) break;
      auto& seen = out.seen[e[0].epoch];
      seen.resize(n);
      for (uint64_t id : e[0].ids) ++seen[id];
    }
    out.after.push_back(std::move(events));
  }
  return out;
}

TEST(LoaderResumeTest, FieldCase_B50_ResumeMidEpochAndOnOtherWorldSizes) {
  for (uint64_t n : {100u, 97u}) {
    TestDatasetOptions dso;
    dso.num_samples = n;
    TestDataset tds(dso);
    ASSERT_TRUE(tds.ok());
    std::shared_ptr<const Dataset> ds = tds.Open();
    // Stops: after 5 steps (epoch 1, batch 0 read); after the last batch (4 steps); after the
    // last batch and the end event.
    struct Stop {
      uint64_t steps;
      bool end_event;
    };
    for (const Stop stop : {Stop{5, false}, Stop{4, false}, Stop{4, true}}) {
      for (uint32_t world2 : {4u, 2u, 1u}) {
        SCOPED_TRACE("N=" + std::to_string(n) + " stop after " + std::to_string(stop.steps) +
                     (stop.end_event ? " steps and the end" : " steps") + ", restored on " +
                     std::to_string(world2) + " ranks");
        const B50Result res = RunB50(ds, stop.steps, 4, world2, stop.end_event);
        // The epoch the state is in: every sample exactly once over all ranks, before and after.
        const std::vector<int>& seen = res.seen.at(res.state_epoch);
        for (uint64_t i = 0; i < n; ++i) ASSERT_EQ(seen[i], 1) << "sample " << i;
        if (stop.steps == 4 && !stop.end_event) {
          EXPECT_EQ(res.state_epoch, 0u);
        }
        if (stop.steps == 4 && stop.end_event) {
          EXPECT_EQ(res.state_epoch, 1u);
        }
        if (world2 != 4) continue;
        // Same world size: every rank's stream after the restore is the uninterrupted one.
        for (uint32_t r = 0; r < 4; ++r) {
          LoaderOptions o;
          o.pin_memory = false;
          o.batch_size = 8;
          o.world_size = 4;
          o.rank = r;
          o.num_threads = 1;
          o.seed = 50;
          std::unique_ptr<Loader> whole = MustCreate(ds, o);
          std::vector<Event> all = ReadEvents(*whole, 2 * (whole->batches_per_epoch() + 1));
          const uint64_t skip = stop.steps + (stop.steps >= 5 || stop.end_event ? 1 : 0);
          const std::vector<Event>& after = res.after[r];
          ASSERT_LE(skip + after.size(), all.size());
          for (size_t i = 0; i < after.size(); ++i) {
            EXPECT_TRUE(after[i] == all[skip + i])
                << "rank " << r << " event " << i << ": " << Describe(after[i]) << " vs "
                << Describe(all[skip + i]);
          }
          if (n == 97 && r > 0 && stop.steps == 4 && !stop.end_event) {
            // The empty last batch was the one read last: the restore reports the end at once.
            ASSERT_FALSE(after.empty());
            EXPECT_TRUE(after[0].end);
          }
        }
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Refusals, and SetEpoch / start_epoch with a state.

Status CreateStatus(std::shared_ptr<const Dataset> ds, const LoaderOptions& o) {
  Result<std::unique_ptr<Loader>> l = Loader::Create(std::move(ds), o);
  return l.ok() ? Status::Ok() : l.status();
}

TEST(LoaderResumeTest, StatesThatCannotBeHonouredAreRefusedByName) {
  TestDatasetOptions dso;
  dso.num_samples = 100;
  TestDataset tds(dso);
  dso.num_samples = 101;
  TestDataset other(dso);
  ASSERT_TRUE(tds.ok() && other.ok());
  std::shared_ptr<const Dataset> ds = tds.Open();
  LoaderOptions o;
  o.pin_memory = false;
  o.batch_size = 4;
  o.world_size = 2;
  o.num_threads = 1;
  o.seed = 3;
  std::unique_ptr<Loader> loader = MustCreate(ds, o);
  ASSERT_EQ(ReadEvents(*loader, 3).size(), 3u);
  const ReaderState saved = loader->state();
  EXPECT_EQ(saved.samples_consumed, 3u * 4 * 2);
  LoaderOptions restore = o;
  restore.resume = saved;
  ASSERT_TRUE(CreateStatus(ds, restore).ok());

  struct Case {
    const char* what;
    LoaderOptions options;
    std::shared_ptr<const Dataset> dataset;
    StatusCode code;
    const char* words;
  };
  std::vector<Case> cases;
  auto add = [&](const char* what, auto edit, StatusCode code, const char* words,
                 std::shared_ptr<const Dataset> dataset = nullptr) {
    LoaderOptions x = restore;
    edit(x);
    cases.push_back({what, x, dataset ? dataset : ds, code, words});
  };
  add(
      "another dataset", [](LoaderOptions&) {}, StatusCode::kInvalidArgument, "another dataset",
      other.Open());
  add(
      "another fingerprint", [](LoaderOptions& x) { x.resume->dataset_fingerprint ^= 1; },
      StatusCode::kInvalidArgument, "fingerprint");
  add(
      "another seed", [](LoaderOptions& x) { x.seed = 4; }, StatusCode::kInvalidArgument, "seed 3");
  add(
      "another shuffle", [](LoaderOptions& x) { x.shuffle = ShuffleMode::kNone; },
      StatusCode::kInvalidArgument, "shuffle exact");
  add(
      "another crop", [](LoaderOptions& x) { x.augment.flip = true; }, StatusCode::kInvalidArgument,
      "flip off");
  add(
      "past the end", [](LoaderOptions& x) { x.resume->samples_consumed = 101; },
      StatusCode::kOutOfRange, "past the end");
  add(
      "order version", [](LoaderOptions& x) { x.resume->order_version = 1; },
      StatusCode::kNotSupported, "order version 1");
  add(
      "start_epoch", [](LoaderOptions& x) { x.start_epoch = 5; }, StatusCode::kInvalidArgument,
      "start_epoch 5");
  for (const Case& c : cases) {
    const Status s = CreateStatus(c.dataset, c.options);
    EXPECT_EQ(s.code(), c.code) << c.what << ": " << s.ToString();
    EXPECT_NE(s.message().find(c.words), std::string::npos) << c.what << ": " << s.ToString();
  }

  // Block order: mid-epoch only with the same world size and batch size; at the start or the
  // end of the epoch with any.
  LoaderOptions block = o;
  block.shuffle = ShuffleMode::kBlock;
  block.block_bytes = 5 * tds.schema().sample_bytes();
  std::unique_ptr<Loader> b = MustCreate(ds, block);
  ASSERT_EQ(ReadEvents(*b, 2).size(), 2u);
  LoaderOptions moved = block;
  moved.resume = b->state();
  moved.world_size = 4;
  Status s = CreateStatus(ds, moved);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
  EXPECT_NE(s.message().find("world size 2"), std::string::npos) << s.ToString();
  moved.block_bytes = 6 * tds.schema().sample_bytes();
  moved.world_size = 2;
  s = CreateStatus(ds, moved);
  EXPECT_NE(s.message().find("blocks of 5 samples"), std::string::npos) << s.ToString();
  ReadEvents(*b, b->batches_per_epoch() - 2);  // to the last batch
  moved = block;
  moved.resume = b->state();
  moved.world_size = 3;
  moved.rank = 2;
  std::unique_ptr<Loader> end = MustCreate(ds, moved);
  ASSERT_NE(end, nullptr);
  std::vector<Event> e = ReadEvents(*end, 2);
  EXPECT_TRUE(e[0].end);   // the saved epoch is over
  EXPECT_FALSE(e[1].end);  // the next one starts from its first batch
  EXPECT_EQ(e[1].epoch, 1u);
  EXPECT_EQ(e[1].index, 0u);
}

TEST(LoaderResumeTest, SetEpochAndStartEpochWithAState) {
  TestDatasetOptions dso;
  dso.num_samples = 60;
  TestDataset tds(dso);
  ASSERT_TRUE(tds.ok());
  std::shared_ptr<const Dataset> ds = tds.Open();
  LoaderOptions o;
  o.pin_memory = false;
  o.batch_size = 10;
  o.num_threads = 2;
  o.start_epoch = 4;
  std::unique_ptr<Loader> whole = MustCreate(ds, o);
  const std::vector<Event> epoch4 = ReadEvents(*whole, 7);
  std::unique_ptr<Loader> first = MustCreate(ds, o);
  ReadEvents(*first, 2);
  LoaderOptions r = o;
  r.resume = first->state();
  EXPECT_EQ(r.resume->epoch, 4u);
  EXPECT_EQ(r.resume->samples_consumed, 20u);
  // start_epoch equal to the state's epoch, then SetEpoch(4): the position is kept.
  std::unique_ptr<Loader> kept = MustCreate(ds, r);
  EXPECT_EQ(kept->state().samples_consumed, 20u);
  kept->SetEpoch(4);
  std::vector<Event> got = ReadEvents(*kept, 1);
  EXPECT_TRUE(got[0] == epoch4[2]);
  // SetEpoch to another epoch: that epoch from its start; later epochs from their start.
  r.start_epoch = 0;
  std::unique_ptr<Loader> moved = MustCreate(ds, r);
  moved->SetEpoch(7);
  EXPECT_EQ(moved->state().epoch, 7u);
  EXPECT_EQ(moved->state().samples_consumed, 0u);
  got = ReadEvents(*moved, 1);
  EXPECT_EQ(got[0].epoch, 7u);
  EXPECT_EQ(got[0].index, 0u);
  EXPECT_EQ(got[0].ids.size(), 10u);
}

}  // namespace
}  // namespace kiln
