// The device upload protocol of reader/loader.h ("Device batches"), on a simulated device that
// runs on any machine: the loader's real code (Loader::CreateWithDeviceOps) drives a DeviceOps
// whose streams are queues executed lazily, only when the host waits for something (an event or
// a stream synchronisation) and in dependency order, so the simulated GPU is as slow as it can
// legally be. "Device memory" is host memory; a copy reads its source when it executes, and
// notes a violation when the source changed between enqueue and execution (a host slot refilled
// under an in-flight copy). The consumer's "kernels" are reads of device memory enqueued on its
// streams. Checked: every batch every consumer stream reads equals the host loader's batch,
// with one stream or several (WaitOn adds streams, NormalizeKernel::Run's WaitOn included),
// across SetEpoch and destruction while the consumer still reads the held batch, when an upload
// fails half-way (the labels copy), with uploads issued ahead of Next(), and with the device
// made current in every entry point.
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "reader/device_ops.h"
#include "reader/loader.h"
#include "tests/reader/device_batch_reference.h"
#include "tests/reader/test_dataset.h"

namespace kiln {
namespace {

using kiln::testing::MakeSchema;
using kiln::testing::TestDataset;
using kiln::testing::TestDatasetOptions;

// A simulated device. Handles are small integers cast to pointers; stream 0 (nullptr) is the
// legacy default stream.
class FakeDevice : public DeviceOps {
 public:
  struct Op {
    enum Kind { kCopy, kRecord, kWait, kRead } kind;
    void* dst = nullptr;
    const void* src = nullptr;
    size_t bytes = 0;
    uint64_t src_hash = 0;  // kCopy: the source bytes' hash at enqueue
    uintptr_t event = 0;
    uint64_t wait_stream = 0, wait_pos = 0;     // kWait: the recording the wait captured
    std::vector<uint8_t>* read_into = nullptr;  // kRead
  };
  struct Stream {
    std::vector<Op> ops;
    size_t done = 0;  // ops executed
  };
  struct Event {
    bool recorded = false;
    uintptr_t stream = 0;
    size_t pos = 0;  // complete once the stream has executed `pos` ops
  };

  int device_ = 3;  // the simulated device's index
  int current_ = 0;
  int enters = 0;
  int entered_wrong = 0;  // calls that ran with another device current (must stay 0)
  std::vector<std::string> violations;
  // CopyToDevice calls number [fail_from, fail_to] that are labels copies (odd: each upload is a
  // data copy then a labels copy) fail, after enqueueing nothing: half-issued uploads.
  int fail_from = -1, fail_to = -1;
  int copies = 0, failed = 0;

  class FakeScope : public Scope {
   public:
    FakeScope(FakeDevice* d, int device) : d_(d), prev_(d->current_) { d->current_ = device; }
    ~FakeScope() override { d_->current_ = prev_; }

   private:
    FakeDevice* d_;
    int prev_;
  };
  Result<std::unique_ptr<Scope>> EnterDevice(int device) override {
    ++enters;
    return std::unique_ptr<Scope>(new FakeScope(this, device));
  }
  Result<cudaStream_t> CreateStream() override {
    Check("cudaStreamCreate");
    const uintptr_t id = next_stream_++;
    streams_[id];
    return reinterpret_cast<cudaStream_t>(id);
  }
  // A consumer stream, as the test's "training loop" would create it.
  cudaStream_t ConsumerStream() {
    const uintptr_t id = next_stream_++;
    streams_[id];
    return reinterpret_cast<cudaStream_t>(id);
  }
  void DestroyStream(cudaStream_t s) override {
    Check("cudaStreamDestroy");
    RunAll(Id(s));
    streams_.erase(Id(s));
    destroyed_streams_++;
  }
  Result<cudaEvent_t> CreateEvent() override {
    Check("cudaEventCreate");
    const uintptr_t id = next_event_++;
    events_[id];
    return reinterpret_cast<cudaEvent_t>(id);
  }
  void DestroyEvent(cudaEvent_t e) override {
    events_.erase(reinterpret_cast<uintptr_t>(e));
    destroyed_events_++;
  }
  Result<void*> Allocate(size_t bytes) override {
    Check("cudaMalloc");
    memory_.emplace_back(new uint8_t[bytes]());
    live_.insert({memory_.back().get(), bytes});
    return static_cast<void*>(memory_.back().get());
  }
  void Free(void* p) override {
    Check("cudaFree");
    // Every stream must be idle with respect to this memory: run everything first, then
    // forbid later access by forgetting the block.
    live_.erase(static_cast<uint8_t*>(p));
  }
  Status CopyToDevice(void* dst, const void* src, size_t bytes, cudaStream_t s) override {
    Check("cudaMemcpyAsync");
    const int n = copies++;
    if (n >= fail_from && n <= fail_to && n % 2 == 1) {
      ++failed;
      return Status::Internal("cudaMemcpyAsync: injected failure");
    }
    Op op{Op::kCopy};
    op.dst = dst;
    op.src = src;
    op.bytes = bytes;
    op.src_hash = Hash(src, bytes);
    streams_.at(Id(s)).ops.push_back(op);
    return Status::Ok();
  }
  Status Record(cudaEvent_t e, cudaStream_t s) override {
    Check("cudaEventRecord");
    if (!streams_.count(Id(s))) return Status::Internal("cudaEventRecord: invalid stream");
    Event& ev = events_.at(reinterpret_cast<uintptr_t>(e));
    Stream& st = streams_.at(Id(s));
    ev.recorded = true;
    ev.stream = Id(s);
    ev.pos = st.ops.size();
    return Status::Ok();
  }
  Status StreamWaitEvent(cudaStream_t s, cudaEvent_t e) override {
    Check("cudaStreamWaitEvent");
    const Event& ev = events_.at(reinterpret_cast<uintptr_t>(e));
    if (!ev.recorded) return Status::Ok();  // an unrecorded event: nothing to wait for
    Op op{Op::kWait};
    op.wait_stream = ev.stream;
    op.wait_pos = ev.pos;
    streams_.at(Id(s)).ops.push_back(op);
    return Status::Ok();
  }
  Status EventSynchronize(cudaEvent_t e) override {
    Check("cudaEventSynchronize");
    const Event& ev = events_.at(reinterpret_cast<uintptr_t>(e));
    if (ev.recorded) RunUntil(ev.stream, ev.pos);
    return Status::Ok();
  }
  Status StreamSynchronize(cudaStream_t s) override {
    Check("cudaStreamSynchronize");
    if (!streams_.count(Id(s))) return Status::Internal("cudaStreamSynchronize: invalid stream");
    RunAll(Id(s));
    return Status::Ok();
  }

  // The consumer's kernel: reads `bytes` of device memory at `src` into `*out` when it runs.
  void EnqueueRead(cudaStream_t s, const void* src, size_t bytes, std::vector<uint8_t>* out) {
    Op op{Op::kRead};
    op.src = src;
    op.bytes = bytes;
    op.read_into = out;
    streams_.at(Id(s)).ops.push_back(op);
  }
  void RunEverything() {
    for (auto& [id, st] : streams_) RunAll(id);
  }
  size_t PendingOps() const {
    size_t n = 0;
    for (const auto& [id, st] : streams_) n += st.ops.size() - st.done;
    return n;
  }
  int destroyed_streams_ = 0, destroyed_events_ = 0;

 private:
  static uintptr_t Id(cudaStream_t s) { return reinterpret_cast<uintptr_t>(s); }
  static uint64_t Hash(const void* p, size_t n) {
    uint64_t h = 1469598103934665603ull;
    const auto* b = static_cast<const uint8_t*>(p);
    for (size_t i = 0; i < n; ++i) h = (h ^ b[i]) * 1099511628211ull;
    return h;
  }
  void Check(const char* call) {
    if (current_ != device_) {
      ++entered_wrong;
      violations.push_back(std::string(call) + " with device " + std::to_string(current_) +
                           " current");
    }
  }
  bool Live(const void* p, size_t n) const {
    auto it = live_.upper_bound(static_cast<uint8_t*>(const_cast<void*>(p)));
    if (it == live_.begin()) return false;
    --it;
    return static_cast<const uint8_t*>(p) + n <= it->first + it->second;
  }
  void RunAll(uintptr_t id) { RunUntil(id, streams_.at(id).ops.size()); }
  void RunUntil(uintptr_t id, size_t pos) {
    Stream& st = streams_.at(id);
    while (st.done < pos) {
      const Op op = st.ops[st.done];
      switch (op.kind) {
        case Op::kWait:
          if (streams_.count(op.wait_stream)) RunUntil(op.wait_stream, op.wait_pos);
          break;
        case Op::kCopy:
          if (Hash(op.src, op.bytes) != op.src_hash) {
            violations.push_back("a copy's host source changed before the copy ran");
          }
          if (!Live(op.dst, op.bytes)) violations.push_back("a copy into freed device memory");
          std::memcpy(op.dst, op.src, op.bytes);
          break;
        case Op::kRead:
          if (!Live(op.src, op.bytes)) violations.push_back("a read of freed device memory");
          op.read_into->assign(static_cast<const uint8_t*>(op.src),
                               static_cast<const uint8_t*>(op.src) + op.bytes);
          break;
        case Op::kRecord:
          break;
      }
      ++st.done;
    }
  }
  uintptr_t next_stream_ = 1;  // 0 is the legacy stream
  uintptr_t next_event_ = 1;
  std::map<uintptr_t, Stream> streams_{{0, Stream{}}};
  std::map<uintptr_t, Event> events_;
  std::vector<std::unique_ptr<uint8_t[]>> memory_;
  std::map<uint8_t*, size_t> live_;
};

LoaderOptions Opts(uint32_t prefetch) {
  return testing::DeviceTestOptions(/*device=*/3, /*threads=*/3, prefetch, /*augment=*/true);
}

TestDatasetOptions Data() {
  TestDatasetOptions dso;
  dso.num_samples = 157;  // 20 batches of 8, the last of 5
  dso.schema = MakeSchema(16, 14, 3);
  return dso;
}

using HostBatch = testing::HostBatchCopy;
using testing::HostReference;

Result<std::unique_ptr<Loader>> Make(const std::string& dir, const LoaderOptions& o,
                                     std::shared_ptr<FakeDevice> dev) {
  KILN_ASSIGN_OR_RETURN(std::unique_ptr<Dataset> ds, Dataset::Open(dir));
  return Loader::CreateWithDeviceOps(std::shared_ptr<const Dataset>(std::move(ds)), o, dev);
}

// Reads of every batch, on one or several consumer streams, never waited for by the host:
// each must see its batch's bytes, however late the simulated device runs them.
TEST(DeviceProtocolTest, LazyDeviceSeesEveryBatchIntact) {
  TestDataset ds(Data());
  ASSERT_TRUE(ds.ok());
  for (uint32_t prefetch : {1u, 2u, 4u}) {
    for (int streams : {1, 2, 3}) {
      SCOPED_TRACE("prefetch " + std::to_string(prefetch) + ", " + std::to_string(streams) +
                   " consumer streams");
      const LoaderOptions o = Opts(prefetch);
      const std::vector<HostBatch> want = HostReference(ds.dir(), o, 2);
      auto dev = std::make_shared<FakeDevice>();
      std::vector<cudaStream_t> consumer;
      for (int i = 0; i < streams; ++i) consumer.push_back(dev->ConsumerStream());
      std::vector<std::vector<uint8_t>> got(want.size() * streams), got_labels(want.size());
      {
        Result<std::unique_ptr<Loader>> l = Make(ds.dir(), o, dev);
        ASSERT_TRUE(l.ok()) << l.status().ToString();
        ASSERT_TRUE((*l)->device_batches());
        size_t k = 0;
        for (int e = 0; e < 2; ++e) {
          Batch b;
          while (true) {
            Result<bool> r = (*l)->Next(&b);
            ASSERT_TRUE(r.ok()) << r.status().ToString();
            if (!*r) break;
            ASSERT_LT(k, want.size());
            EXPECT_EQ(b.device, 3);
            for (int i = 0; i < streams; ++i) {
              ASSERT_TRUE(b.WaitOn(consumer[i]).ok());
              dev->EnqueueRead(consumer[i], b.device_data, b.bytes(), &got[k * streams + i]);
            }
            dev->EnqueueRead(consumer[0], b.device_labels, b.size * sizeof(int64_t),
                             &got_labels[k]);
            ++k;
          }
        }
        ASSERT_EQ(k, want.size());
      }  // the destructor waits for the consumer's reads of the held batch
      EXPECT_EQ(dev->PendingOps(), 0u) << "the destructor left device work unfinished";
      dev->RunEverything();
      for (size_t k = 0; k < want.size(); ++k) {
        for (int i = 0; i < streams; ++i) {
          EXPECT_TRUE(got[k * streams + i] == want[k].data) << "batch " << k << " stream " << i;
        }
        EXPECT_TRUE(got_labels[k] == want[k].label_bytes()) << "labels of batch " << k;
      }
      EXPECT_TRUE(dev->violations.empty()) << dev->violations.front();
      EXPECT_EQ(dev->entered_wrong, 0);
    }
  }
}

// Uploads are issued as soon as the consumer thread sees a batch filled: after Next(b) returns,
// the upload of b + 1 (filled meanwhile) is already enqueued, before Next(b + 1) is called.
TEST(DeviceProtocolTest, UploadIssuedAheadOfNext) {
  TestDataset ds(Data());
  ASSERT_TRUE(ds.ok());
  auto dev = std::make_shared<FakeDevice>();
  Result<std::unique_ptr<Loader>> l = Make(ds.dir(), Opts(4), dev);
  ASSERT_TRUE(l.ok());
  // Give the fetch threads time to fill the slots after each batch; within a few batches a
  // Next() sees its successor filled and issues that upload too.
  Batch b;
  for (int i = 0; i < 19; ++i) {
    ASSERT_TRUE((*l)->Next(&b).ok());
    if ((*l)->stats().uploads > (*l)->stats().batches) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  const LoaderStats st = (*l)->stats();
  EXPECT_GT(st.uploads, st.batches) << "no upload was issued ahead of its Next()";
}

// SetEpoch and destruction while the consumer's work on the held batch has not run: the device
// buffer must not be overwritten or freed first, and no host slot refilled under a copy.
TEST(DeviceProtocolTest, SetEpochAndDestroyWhileTheConsumerStillReads) {
  TestDataset ds(Data());
  ASSERT_TRUE(ds.ok());
  const LoaderOptions o = Opts(2);
  const std::vector<HostBatch> want = HostReference(ds.dir(), o, 1);
  for (bool destroy : {false, true}) {
    SCOPED_TRACE(destroy ? "destroy" : "SetEpoch");
    auto dev = std::make_shared<FakeDevice>();
    cudaStream_t consumer = dev->ConsumerStream();
    std::vector<uint8_t> held;
    std::vector<std::vector<uint8_t>> after(6);
    {
      Result<std::unique_ptr<Loader>> l = Make(ds.dir(), o, dev);
      ASSERT_TRUE(l.ok());
      Batch b;
      for (int i = 0; i < 5; ++i) ASSERT_TRUE((*l)->Next(&b).ok());
      ASSERT_TRUE(b.WaitOn(consumer).ok());
      dev->EnqueueRead(consumer, b.device_data, b.bytes(), &held);
      if (!destroy) {
        (*l)->SetEpoch(0);
        EXPECT_FALSE(b.WaitOn(consumer).ok()) << "WaitOn accepted a released batch";
        for (size_t k = 0; k < after.size(); ++k) {
          Result<bool> r = (*l)->Next(&b);
          ASSERT_TRUE(r.ok() && *r);
          ASSERT_TRUE(b.WaitOn(consumer).ok());
          dev->EnqueueRead(consumer, b.device_data, b.bytes(), &after[k]);
        }
      }
    }
    dev->RunEverything();
    EXPECT_TRUE(held == want[4].data) << "the held batch changed before the consumer read it";
    if (!destroy) {
      for (size_t k = 0; k < after.size(); ++k) EXPECT_TRUE(after[k] == want[k].data) << k;
    }
    EXPECT_TRUE(dev->violations.empty()) << dev->violations.front();
    EXPECT_EQ(dev->entered_wrong, 0);
  }
}

// A labels copy fails after the data copy was enqueued: Next() returns the error, and the host
// slot must not go back to the fetch threads before that data copy ran (the simulated copy
// notes a changed source). The following batches are intact.
TEST(DeviceProtocolTest, HalfFailedUploadNeverRefillsUnderTheCopy) {
  TestDataset ds(Data());
  ASSERT_TRUE(ds.ok());
  const LoaderOptions o = Opts(1);  // two slots: a slot is refilled as soon as it is released
  const std::vector<HostBatch> want = HostReference(ds.dir(), o, 1);
  auto dev = std::make_shared<FakeDevice>();
  // Three uploads in a row fail at their labels copy: when the first is an upload issued ahead
  // (whose failure Next() of that batch retries), the retry fails too and Next() returns it.
  dev->fail_from = 7;
  dev->fail_to = 11;
  cudaStream_t consumer = dev->ConsumerStream();
  Result<std::unique_ptr<Loader>> l = Make(ds.dir(), o, dev);
  ASSERT_TRUE(l.ok());
  std::vector<std::vector<uint8_t>> got(want.size());
  size_t k = 0, errors = 0;
  Batch b;
  while (true) {
    Result<bool> r = (*l)->Next(&b);
    if (!r.ok()) {
      ++errors;
      EXPECT_NE(r.status().ToString().find("injected failure"), std::string::npos);
      ++k;
      continue;
    }
    if (!*r) break;
    ASSERT_TRUE(b.WaitOn(consumer).ok());
    dev->EnqueueRead(consumer, b.device_data, b.bytes(), &got[k]);
    ++k;
  }
  l->reset();
  dev->RunEverything();
  EXPECT_EQ(dev->failed, 3);
  EXPECT_GE(errors, 1u);
  EXPECT_LE(errors, 3u);
  EXPECT_EQ(k, want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    if (got[i].empty()) continue;  // the failed batch
    EXPECT_TRUE(got[i] == want[i].data) << "batch " << i;
  }
  EXPECT_TRUE(dev->violations.empty()) << dev->violations.front();
}

// WaitOn keeps up to 4 streams per batch and refuses a fifth, naming the limit; Release()
// releases the held batch at once (so its streams may be destroyed before the loader).
TEST(DeviceProtocolTest, StreamLimitAndExplicitRelease) {
  TestDataset ds(Data());
  ASSERT_TRUE(ds.ok());
  auto dev = std::make_shared<FakeDevice>();
  Result<std::unique_ptr<Loader>> l = Make(ds.dir(), Opts(2), dev);
  ASSERT_TRUE(l.ok());
  Batch b;
  ASSERT_TRUE((*l)->Next(&b).ok());
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(b.WaitOn(dev->ConsumerStream()).ok());
  const Status fifth = b.WaitOn(dev->ConsumerStream());
  EXPECT_EQ(fifth.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(fifth.ToString().find("join"), std::string::npos) << fifth.ToString();
  (*l)->Release();
  EXPECT_FALSE(b.WaitOn(dev->ConsumerStream()).ok());
  (*l)->Release();  // nothing held: a no-op
  ASSERT_TRUE((*l)->Next(&b).ok());
  EXPECT_TRUE(dev->violations.empty());
}

// The device is made current for every call into the ring, whatever the thread had current,
// and the thread's device is restored after.
TEST(DeviceProtocolTest, EveryEntryPointMakesTheDeviceCurrent) {
  TestDataset ds(Data());
  ASSERT_TRUE(ds.ok());
  auto dev = std::make_shared<FakeDevice>();
  dev->current_ = 3;  // Create runs with the device current (as the real guard does)
  Result<std::unique_ptr<Loader>> l = Make(ds.dir(), Opts(2), dev);
  ASSERT_TRUE(l.ok());
  dev->current_ = 0;  // the consumer thread has another device current
  cudaStream_t consumer = dev->ConsumerStream();
  Batch b;
  for (int i = 0; i < 4; ++i) {
    ASSERT_TRUE((*l)->Next(&b).ok());
    EXPECT_EQ(dev->current_, 0);
    ASSERT_TRUE(b.WaitOn(consumer).ok());
    EXPECT_EQ(dev->current_, 0);
  }
  (*l)->SetEpoch(1);
  EXPECT_EQ(dev->current_, 0);
  ASSERT_TRUE((*l)->Next(&b).ok());
  l->reset();
  EXPECT_EQ(dev->current_, 0);
  EXPECT_EQ(dev->entered_wrong, 0) << dev->violations.front();
  EXPECT_GT(dev->destroyed_streams_, 0);
}

}  // namespace
}  // namespace kiln
