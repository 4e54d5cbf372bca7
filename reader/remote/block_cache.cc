#include "reader/remote/block_cache.h"

#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <new>
#include <utility>

namespace kiln::remote {

BlockCache::BlockCache(const std::vector<ObjectInfo>& objects,
                       std::vector<std::unique_ptr<RemoteClient>> clients, uint32_t capacity_blocks,
                       uint32_t max_in_flight)
    : objects_(objects),
      capacity_blocks_(std::max<uint32_t>(1, capacity_blocks)),
      max_in_flight_(max_in_flight) {
  for (std::unique_ptr<RemoteClient>& client : clients) {
    auto receiver = std::make_unique<Receiver>();
    receiver->client = std::move(client);
    receivers_.push_back(std::move(receiver));
  }
  for (std::unique_ptr<Receiver>& receiver : receivers_) {
    Receiver* r = receiver.get();
    r->thread = std::thread([this, r] { Run(r); });
  }
}

BlockCache::~BlockCache() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  work_cv_.notify_all();
  for (std::unique_ptr<Receiver>& receiver : receivers_) {
    if (receiver->thread.joinable()) receiver->thread.join();
  }
}

// Forgets the extent `e` (a failed fetch), so that a later read fetches it afresh; readers
// holding it still see its error. mu_ held.
void BlockCache::DropLocked(const Extent& e) {
  auto held = held_.find(Key{e.object, e.offset});
  if (held == held_.end() || held->second.get() != &e) return;
  held_bytes_ -= e.length;
  held_.erase(held);
  for (auto a = age_.begin(); a != age_.end(); ++a) {
    if (*a == Key{e.object, e.offset}) {
      age_.erase(a);
      return;
    }
  }
}

void BlockCache::FreeBytes::operator()(uint8_t* p) const { std::free(p); }

namespace {

constexpr uint64_t kHugePage = 2 << 20;

// `length` bytes for an extent. From 2 MiB up: aligned to 2 MiB and advised for transparent
// huge pages, so that the first write of the GET's body takes a page fault per 2 MiB instead
// of one per 4 KiB (at 0 ms added RTT the faults of a fresh 4 MiB buffer cost more CPU than
// receiving its bytes); where the kernel gives none, ordinary pages.
BlockCache::Bytes NewBytes(uint64_t length) {
  if (length < kHugePage) {
    auto* p = static_cast<uint8_t*>(std::malloc(std::max<uint64_t>(1, length)));
    if (p == nullptr) throw std::bad_alloc();
    return BlockCache::Bytes(p);
  }
  const uint64_t rounded = (length + kHugePage - 1) / kHugePage * kHugePage;
  auto* p = static_cast<uint8_t*>(std::aligned_alloc(kHugePage, rounded));
  if (p == nullptr) throw std::bad_alloc();
  (void)madvise(p, rounded, MADV_HUGEPAGE);
  return BlockCache::Bytes(p);
}

}  // namespace

// A buffer of at least `length` bytes: an evicted extent's when one is large enough (its pages
// already mapped), else a new one. mu_ held.
BlockCache::Bytes BlockCache::TakeBufferLocked(uint64_t length, uint64_t* size) {
  // The smallest that fits, so a piece of a block does not take a whole block's buffer that a
  // later block needs.
  size_t best = spare_.size();
  for (size_t i = 0; i < spare_.size(); ++i) {
    if (spare_[i].second >= length &&
        (best == spare_.size() || spare_[i].second < spare_[best].second)) {
      best = i;
    }
  }
  if (best == spare_.size()) {
    *size = length;
    return NewBytes(length);
  }
  *size = spare_[best].second;
  Bytes bytes = std::move(spare_[best].first);
  spare_[best] = std::move(spare_.back());
  spare_.pop_back();
  return bytes;
}

// Whether an extent of `length` bytes fits beside those held: each counts as its share of the
// largest extent acquired (largest_), so capacity_blocks_ whole blocks fit, and the pieces of a
// block that spans two objects (each fetched as an extent of its own) count as one block
// together. mu_ held.
bool BlockCache::FitsLocked(uint64_t length) const {
  return held_.empty() || held_bytes_ + length <= uint64_t{capacity_blocks_} * largest_;
}

// Evicts the oldest extents no read holds until one of `length` bytes fits. mu_ held.
bool BlockCache::MakeRoomLocked(uint64_t length, bool at_once) {
  int64_t now_us = 0;
  for (size_t i = 0; i < age_.size() && !FitsLocked(length);) {
    auto it = held_.find(age_[i]);
    // use_count 1: only the cache holds it (no reader waits on it, no fetch in progress).
    if (it != held_.end() && it->second.use_count() == 1 && IsReady(*it->second)) {
      // Evicted only once it has stayed unused a while: the next chunk's reads of a block
      // often come a moment after the last chunk's are done.
      if (now_us == 0) {
        now_us = std::chrono::duration_cast<std::chrono::microseconds>(
                     std::chrono::steady_clock::now().time_since_epoch())
                     .count();
      }
      int64_t& since = it->second->unused_since_us;
      if (since == 0) since = now_us;
      if (!at_once && now_us - since < kEvictAfterUnusedUs) {
        ++i;
        continue;
      }
      // No one else holds it: its buffer is kept for the next extent.
      if (it->second->result >= 0 && spare_.size() < capacity_blocks_) {
        spare_.emplace_back(std::move(it->second->bytes), it->second->buffer_bytes);
      }
      held_bytes_ -= it->second->length;
      held_.erase(it);
      age_.erase(age_.begin() + static_cast<std::ptrdiff_t>(i));
      continue;
    }
    ++i;
  }
  return FitsLocked(length);
}

std::shared_ptr<const BlockCache::Extent> BlockCache::Acquire(uint32_t object, uint64_t offset,
                                                              uint64_t length, bool* full,
                                                              bool read_ahead) {
  std::lock_guard<std::mutex> lock(mu_);
  if (full != nullptr) *full = false;
  const Key key{object, offset};
  auto it = held_.find(key);
  if (it != held_.end() && it->second->length == length) {
    it->second->unused_since_us = 0;  // in use again
    return it->second;
  }
  if (it != held_.end()) return nullptr;  // another extent at the same offset: read directly
  largest_ = std::max(largest_, length);
  if (!MakeRoomLocked(length, read_ahead)) {
    if (full != nullptr) *full = true;
    return nullptr;
  }
  auto extent = std::make_shared<Extent>();
  extent->object = object;
  extent->offset = offset;
  extent->length = length;
  extent->bytes = TakeBufferLocked(length, &extent->buffer_bytes);
  held_.emplace(key, extent);
  held_bytes_ += length;
  age_.push_back(key);
  to_fetch_.push_back(extent);
  work_cv_.notify_one();
  return extent;
}

void BlockCache::WaitAny(uint64_t seen, int timeout_ms) {
  std::unique_lock<std::mutex> lock(mu_);
  ready_cv_.wait_for(lock, std::chrono::milliseconds(timeout_ms),
                     [&] { return fetches() != seen || stop_; });
}

RequestStats BlockCache::TakeRequestStats() {
  std::lock_guard<std::mutex> lock(mu_);
  RequestStats all;
  for (const std::unique_ptr<Receiver>& receiver : receivers_) all.Add(receiver->stats);
  const RequestStats delta = all.Since(taken_);
  taken_ = all;
  return delta;
}

// A receiver's thread: takes acquired extents, oldest first, while it has room (max_in_flight_),
// gives them to its client (all in flight at once) and marks each one ready, or failed, when
// its GET completes.
void BlockCache::Run(Receiver* receiver) {
  RemoteClient& client = *receiver->client;
  std::map<uint64_t, std::shared_ptr<Extent>> in_flight;  // by tag
  uint64_t next_tag = 0;
  const size_t room = max_in_flight_ == 0 ? SIZE_MAX : max_in_flight_;
  while (true) {
    std::vector<std::shared_ptr<Extent>> start;
    {
      std::unique_lock<std::mutex> lock(mu_);
      work_cv_.wait(lock, [&] {
        return stop_ || (!to_fetch_.empty() && in_flight.size() < room) || !in_flight.empty();
      });
      if (stop_) return;
      while (!to_fetch_.empty() && in_flight.size() + start.size() < room) {
        start.push_back(std::move(to_fetch_.front()));
        to_fetch_.pop_front();
      }
    }
    for (std::shared_ptr<Extent>& e : start) {
      const uint64_t tag = next_tag++;
      client.QueueRange(tag, objects_[e->object], e->offset, e->length, e->bytes.get());
      in_flight.emplace(tag, std::move(e));
    }
    RemoteCompletion done;
    // A short wait, so extents acquired meanwhile start soon (the client cannot be woken).
    Result<bool> got = client.WaitFor(&done, 2);
    std::lock_guard<std::mutex> lock(mu_);
    receiver->stats = client.stats();
    if (!got.ok()) {
      // The client itself failed (not a read): every extent in flight fails with its error.
      for (auto& [tag, e] : in_flight) {
        e->result = -EIO;
        e->error = got.status().message();
        e->ready.store(true, std::memory_order_release);
        DropLocked(*e);
      }
      in_flight.clear();
      fetches_.fetch_add(1, std::memory_order_release);
      ready_cv_.notify_all();
      continue;
    }
    if (!*got) continue;
    auto it = in_flight.find(done.tag);
    if (it == in_flight.end()) continue;
    Extent& e = *it->second;
    if (done.status.ok()) {
      e.result = static_cast<int64_t>(done.bytes);
    } else {
      e.result = -ReadErrno(done);
      e.error = done.status.message();
    }
    e.ready.store(true, std::memory_order_release);
    if (!done.status.ok()) DropLocked(e);
    fetches_.fetch_add(1, std::memory_order_release);
    in_flight.erase(it);
    ready_cv_.notify_all();
  }
}

}  // namespace kiln::remote
