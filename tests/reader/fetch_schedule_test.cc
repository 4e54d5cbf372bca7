// FetchSchedule: tasks in order, chunk by chunk; never more than `slots` batches ahead of the
// consumer's releases; nothing claimable while stopped or past the epoch's end.
#include "reader/fetch_schedule.h"

#include <gtest/gtest.h>

namespace kiln {
namespace {

TEST(FetchScheduleTest, ClaimsTasksInOrderAndWaitsForTheSlotsRelease) {
  FetchSchedule schedule;
  schedule.Configure(/*slots=*/2, /*chunks_per_batch=*/3);
  EXPECT_FALSE(schedule.claimable()) << "no epoch started";
  schedule.Start(/*batches=*/4);
  uint64_t batch = 0;
  uint32_t chunk = 0;
  for (uint64_t task = 0; task < 6; ++task) {  // batches 0 and 1 fill the two slots
    ASSERT_TRUE(schedule.claimable()) << task;
    schedule.Claim(&batch, &chunk);
    EXPECT_EQ(batch, task / 3);
    EXPECT_EQ(chunk, task % 3);
  }
  EXPECT_FALSE(schedule.claimable()) << "batch 2 reuses batch 0's slot, not released";
  schedule.Release();
  ASSERT_TRUE(schedule.claimable());
  schedule.Claim(&batch, &chunk);
  EXPECT_EQ(batch, 2u);
  EXPECT_EQ(chunk, 0u);
}

TEST(FetchScheduleTest, NothingClaimablePastTheEndOrWhileStopped) {
  FetchSchedule schedule;
  schedule.Configure(4, 1);
  schedule.Start(2);
  uint64_t batch = 0;
  uint32_t chunk = 0;
  schedule.Claim(&batch, &chunk);
  schedule.Claim(&batch, &chunk);
  EXPECT_EQ(batch, 1u);
  EXPECT_FALSE(schedule.claimable()) << "the epoch has 2 batches";
  schedule.Start(3);
  EXPECT_TRUE(schedule.claimable());
  schedule.Stop();
  EXPECT_FALSE(schedule.claimable());
}

}  // namespace
}  // namespace kiln
