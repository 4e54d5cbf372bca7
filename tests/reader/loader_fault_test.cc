// Field case B27 (b): a shard truncated by another process while the loader has it mapped gives
// an error naming the shard (in the message and in Status::location()), not a SIGBUS that kills
// the process. Tests reader/loader.cc's use of formats/fault_guard.h.
#include <gtest/gtest.h>
#include <unistd.h>

#include <string>

#include "reader/loader.h"
#include "tests/reader/test_dataset.h"

namespace kiln {
namespace {

using testing::TestDataset;
using testing::TestDatasetOptions;

TEST(LoaderFaultTest, FieldCase_B27_ShardTruncatedWhileMappedIsAnErrorNamingTheShard) {
  TestDatasetOptions o;
  o.num_samples = 2000;
  o.schema = testing::MakeSchema(32, 32, 3);  // 3 KiB samples: the shard spans many pages
  TestDataset data(o);
  ASSERT_TRUE(data.ok());
  LoaderOptions lo;
  lo.batch_size = 50;
  lo.num_threads = 2;
  lo.prefetch = 1;
  lo.shuffle = ShuffleMode::kNone;
  auto loader = Loader::Create(data.Open(), lo);
  ASSERT_TRUE(loader.ok()) << loader.status().ToString();
  Batch batch;
  Result<bool> first = (*loader)->Next(&batch);
  ASSERT_TRUE(first.ok() && *first);

  // Another process would do this; the effect on our mapping is the same.
  const std::string shard = data.ShardPath(0);
  ASSERT_EQ(::truncate(shard.c_str(), 64 * 1024), 0);

  bool saw_error = false;
  for (int i = 0; i < 100; ++i) {
    Result<bool> more = (*loader)->Next(&batch);
    if (!more.ok()) {
      saw_error = true;
      EXPECT_EQ(more.status().code(), StatusCode::kIOError);
      EXPECT_NE(more.status().message().find(shard), std::string::npos) << more.status().message();
      EXPECT_NE(more.status().message().find("SIGBUS"), std::string::npos);
      // The same place in fields: the shard, a record of it, its index entry's offset.
      const ErrorLocation& where = more.status().location();
      EXPECT_EQ(where.file, shard);
      EXPECT_GE(where.record, 0);
      EXPECT_LT(where.record, 2000);
      EXPECT_GE(where.offset, 64 * 1024) << "the entry read lies past the truncation point";
      EXPECT_EQ(
          more.status().message().rfind(shard + " record " + std::to_string(where.record) +
                                            " (offset " + std::to_string(where.offset) + "): ",
                                        0),
          0u)
          << more.status().message();
      EXPECT_EQ(more.status().reason().rfind("the mapped file could not be read (SIGBUS)", 0), 0u);
      break;
    }
    if (!*more) break;
  }
  EXPECT_TRUE(saw_error) << "reading past the truncation point should have failed";
}

}  // namespace
}  // namespace kiln
