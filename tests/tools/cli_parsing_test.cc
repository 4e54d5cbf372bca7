// Tests of the `kiln` command line's value parsing (tools/cli/cli_parsing.h).
#include "tools/cli/cli_parsing.h"

#include <gtest/gtest.h>

namespace kiln {
namespace {

TEST(CliParsingTest, ImageSizeIsHOrHxW) {
  uint32_t h = 0, w = 0;
  ASSERT_TRUE(ParseImageSize("28", &h, &w).ok());
  EXPECT_EQ(h, 28u);
  EXPECT_EQ(w, 28u);
  ASSERT_TRUE(ParseImageSize("224x160", &h, &w).ok());
  EXPECT_EQ(h, 224u);
  EXPECT_EQ(w, 160u);
  for (const char* bad : {"", "0", "x", "28x", "x28", "-3", "28x0", "1e3", "70000", "28x28x3"}) {
    Status s = ParseImageSize(bad, &h, &w);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(s.message().find("--size"), std::string::npos) << bad;
  }
}

TEST(CliParsingTest, ByteSizesTakeBinarySuffixes) {
  EXPECT_EQ(*ParseByteSize("4096"), 4096u);
  EXPECT_EQ(*ParseByteSize("64KiB"), 64u << 10);
  EXPECT_EQ(*ParseByteSize("64MiB"), 64u << 20);
  EXPECT_EQ(*ParseByteSize("2G"), uint64_t{2} << 30);
  EXPECT_EQ(*ParseByteSize("3M"), 3u << 20);
  EXPECT_EQ(*ParseByteSize("10TiB"), uint64_t{10} << 40);
  for (const char* bad : {"", "MiB", "12XB", "1.5GiB", "-1"}) {
    const Result<uint64_t> r = ParseByteSize(bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_NE(r.status().message().find("whole number with an optional B, KiB"), std::string::npos)
        << r.status().message();
  }
  // A well-formed number that is too large is refused for its size, not its suffix.
  const Result<uint64_t> huge = ParseByteSize("99999999999GiB");
  ASSERT_FALSE(huge.ok());
  EXPECT_NE(huge.status().message().find("larger than 1 PiB"), std::string::npos)
      << huge.status().message();
}

// --shard-size outside the writer's range is refused with the flag and the range, whichever the
// suffix; a malformed one names the flag and the suffixes.
TEST(CliParsingTest, ShardSizeMessagesNameTheFlagAndTheRule) {
  for (const char* out_of_range : {"10TiB", "2000GiB", "0", "1023"}) {
    PackOptions o;
    const Status s =
        ParsePackFlags("28", 0, "center", 1, "hwc", "uint8", "", "", out_of_range, "none", &o);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << out_of_range;
    EXPECT_EQ(s.message(), "--shard-size " + std::string(out_of_range) +
                               ": a shard must be between 1KiB and 1TiB");
  }
  PackOptions o;
  ASSERT_TRUE(
      ParsePackFlags("28", 0, "center", 1, "hwc", "uint8", "", "", "1TiB", "none", &o).ok());
  EXPECT_EQ(o.shard_size_bytes, uint64_t{1} << 40);
  const Status s = ParsePackFlags("28", 0, "center", 1, "hwc", "uint8", "", "", "12XB", "none", &o);
  EXPECT_EQ(s.message().rfind("--shard-size: size '12XB'", 0), 0u) << s.message();
}

TEST(CliParsingTest, ChannelValuesAreOneOrThreeNumbers) {
  std::array<float, 3> v{};
  ASSERT_TRUE(ParseChannelValues("--mean", "0.5", &v).ok());
  EXPECT_EQ(v, (std::array<float, 3>{0.5f, 0.5f, 0.5f}));
  ASSERT_TRUE(ParseChannelValues("--mean", "0.485,0.456,0.406", &v).ok());
  EXPECT_FLOAT_EQ(v[2], 0.406f);
  for (const char* bad :
       {"", "a", "1,2", "1,2,3,4", "1,,3", "nan", "0.5,nan,0.5", "inf", "-inf", "1e99"}) {
    const Status s = ParseChannelValues("--std", bad, &v);
    EXPECT_EQ(s.message(),
              "--std '" + std::string(bad) + "' must be 1 or 3 comma-separated finite numbers");
  }
}

TEST(CliParsingTest, NanMeanIsRefusedNamingTheFlag) {
  PackOptions o;
  const Status s =
      ParsePackFlags("28", 0, "center", 1, "hwc", "float32", "nan", "", "1MiB", "none", &o);
  EXPECT_EQ(s.message(), "--mean 'nan' must be 1 or 3 comma-separated finite numbers");
}

TEST(CliParsingTest, GridNeedsRowsAndColumns) {
  uint32_t r = 0, c = 0;
  ASSERT_TRUE(ParseGrid("4x8", &r, &c).ok());
  EXPECT_EQ(r, 4u);
  EXPECT_EQ(c, 8u);
  EXPECT_FALSE(ParseGrid("8", &r, &c).ok());
  EXPECT_FALSE(ParseGrid("0x8", &r, &c).ok());
}

TEST(CliParsingTest, PackFlagsFillTheOptions) {
  PackOptions o;
  ASSERT_TRUE(ParsePackFlags("32x48", 40, "none", 3, "chw", "float16", "0.5", "0.25,0.5,1", "1MiB",
                             "zstd:7", &o)
                  .ok());
  EXPECT_EQ(o.preprocess.schema.height, 32u);
  EXPECT_EQ(o.preprocess.schema.width, 48u);
  EXPECT_EQ(o.preprocess.schema.layout, Layout::kCHW);
  EXPECT_EQ(o.preprocess.schema.dtype, DType::kFloat16);
  EXPECT_EQ(o.preprocess.resize_shorter, 40u);
  EXPECT_EQ(o.preprocess.crop, CropMode::kNone);
  EXPECT_FLOAT_EQ(o.preprocess.std[1], 0.5f);
  EXPECT_EQ(o.shard_size_bytes, 1u << 20);
  EXPECT_EQ(o.compression.codec, Codec::kZstd);
  EXPECT_EQ(o.compression.level, 7);
}

TEST(CliParsingTest, MeanAndStdAreRefusedForUint8) {
  PackOptions o;
  Status s = ParsePackFlags("28", 0, "center", 1, "hwc", "uint8", "0.5", "", "1MiB", "none", &o);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace kiln
