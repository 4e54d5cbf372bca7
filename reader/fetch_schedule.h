// kiln::FetchSchedule: the order in which a Loader's fetch threads claim work in an epoch.
//
// An epoch's batches are split into `chunks_per_batch` tasks each (one per fetch thread, so
// that even prefetch 1 keeps every thread busy); task t is chunk t % chunks_per_batch of batch
// t / chunks_per_batch. Tasks are claimed strictly in order. Batch b fills slot b % slots, so a
// task is claimable only once the consumer has released batch b - slots, the slot's previous
// batch: the fetch threads run at most `slots` batches ahead of the consumer.
//
// Thread safety: none of its own. The Loader guards it with its mutex (every call requires it
// held) and resets it only with no fetch thread busy.
#ifndef KILN_READER_FETCH_SCHEDULE_H_
#define KILN_READER_FETCH_SCHEDULE_H_

#include <cstdint>

namespace kiln {

class FetchSchedule {
 public:
  // `slots` batch slots (>= 1) and `chunks_per_batch` tasks per batch (>= 1); no epoch yet.
  void Configure(uint64_t slots, uint32_t chunks_per_batch) {
    slots_ = slots;
    chunks_per_batch_ = chunks_per_batch;
  }
  uint32_t chunks_per_batch() const { return chunks_per_batch_; }

  // Stops handing out tasks (before an epoch switch waits for the busy threads).
  void Stop() { total_tasks_ = 0; }
  // Starts an epoch of `batches` batches, none claimed or released.
  void Start(uint64_t batches) {
    next_task_ = 0;
    total_tasks_ = batches * chunks_per_batch_;
    released_ = 0;
  }

  // True when the next task exists and its batch's slot is free.
  bool claimable() const {
    return next_task_ < total_tasks_ && next_task_ / chunks_per_batch_ < released_ + slots_;
  }
  // Claims the next task: sets its batch and chunk. Requires claimable().
  void Claim(uint64_t* batch, uint32_t* chunk) {
    const uint64_t task = next_task_++;
    *batch = task / chunks_per_batch_;
    *chunk = static_cast<uint32_t>(task % chunks_per_batch_);
  }
  // The consumer released the oldest batch it held: its slot may be refilled.
  void Release() { ++released_; }

 private:
  uint64_t slots_ = 1;
  uint32_t chunks_per_batch_ = 1;
  uint64_t next_task_ = 0;    // the next task to claim
  uint64_t total_tasks_ = 0;  // tasks of the epoch; 0 while stopped
  uint64_t released_ = 0;     // batches the consumer has released this epoch
};

}  // namespace kiln

#endif  // KILN_READER_FETCH_SCHEDULE_H_
