// Tests for formats/tensor_schema.h: sizes, names, parsing, shape strings and validation.
#include "formats/tensor_schema.h"

#include <gtest/gtest.h>

namespace kiln {
namespace {

TensorSchema Make(DType dtype, Layout layout, uint32_t h, uint32_t w, uint32_t c) {
  TensorSchema s;
  s.dtype = dtype;
  s.layout = layout;
  s.height = h;
  s.width = w;
  s.channels = c;
  return s;
}

TEST(TensorSchemaTest, OnDiskNumbersNeverChange) {
  // Stored in shard header bytes 24 and 25 (formats/shards/shard_format.md section 2).
  EXPECT_EQ(static_cast<int>(DType::kUint8), 1);
  EXPECT_EQ(static_cast<int>(DType::kFloat16), 2);
  EXPECT_EQ(static_cast<int>(DType::kFloat32), 3);
  EXPECT_EQ(static_cast<int>(Layout::kHWC), 1);
  EXPECT_EQ(static_cast<int>(Layout::kCHW), 2);
}

TEST(TensorSchemaTest, DTypeSizesAndNamesRoundTrip) {
  EXPECT_EQ(DTypeSize(DType::kUint8), 1u);
  EXPECT_EQ(DTypeSize(DType::kFloat16), 2u);
  EXPECT_EQ(DTypeSize(DType::kFloat32), 4u);
  EXPECT_EQ(DTypeSize(static_cast<DType>(9)), 0u);
  for (DType d : {DType::kUint8, DType::kFloat16, DType::kFloat32}) {
    Result<DType> parsed = ParseDType(DTypeName(d));
    ASSERT_TRUE(parsed.ok());
    EXPECT_EQ(*parsed, d);
  }
  EXPECT_EQ(*ParseDType("FLOAT32"), DType::kFloat32);
  Result<DType> bad = ParseDType("int8");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("int8"), std::string::npos);
}

TEST(TensorSchemaTest, LayoutNamesRoundTrip) {
  EXPECT_EQ(LayoutName(Layout::kHWC), "hwc");
  EXPECT_EQ(LayoutName(Layout::kCHW), "chw");
  EXPECT_EQ(*ParseLayout("CHW"), Layout::kCHW);
  EXPECT_EQ(*ParseLayout("hwc"), Layout::kHWC);
  Result<Layout> bad = ParseLayout("nhwc");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("nhwc"), std::string::npos);
}

TEST(TensorSchemaTest, SizesAndShapeString) {
  const TensorSchema hwc = Make(DType::kFloat32, Layout::kHWC, 28, 30, 3);
  EXPECT_EQ(hwc.elements(), 28u * 30u * 3u);
  EXPECT_EQ(hwc.sample_bytes(), 28u * 30u * 3u * 4u);
  EXPECT_EQ(hwc.ShapeString(), "[28, 30, 3]");
  const TensorSchema chw = Make(DType::kUint8, Layout::kCHW, 28, 30, 3);
  EXPECT_EQ(chw.ShapeString(), "[3, 28, 30]");
  EXPECT_NE(hwc, chw);
  EXPECT_EQ(chw, Make(DType::kUint8, Layout::kCHW, 28, 30, 3));
  // No 32-bit overflow in elements().
  EXPECT_EQ(Make(DType::kUint8, Layout::kHWC, 70000, 70000, 3).elements(),
            uint64_t{70000} * 70000 * 3);
}

TEST(TensorSchemaTest, ValidateAcceptsGoodSchemas) {
  EXPECT_TRUE(Make(DType::kUint8, Layout::kHWC, 1, 1, 1).Validate().ok());
  EXPECT_TRUE(Make(DType::kFloat16, Layout::kCHW, 224, 224, 3).Validate().ok());
}

TEST(TensorSchemaTest, ValidateRejectsEachBadField) {
  const TensorSchema bad[] = {
      Make(static_cast<DType>(0), Layout::kHWC, 2, 2, 1),
      Make(DType::kUint8, static_cast<Layout>(7), 2, 2, 1),
      Make(DType::kUint8, Layout::kHWC, 0, 2, 1),
      Make(DType::kUint8, Layout::kHWC, 2, 0, 1),
      Make(DType::kUint8, Layout::kHWC, 2, 2, 2),
      Make(DType::kUint8, Layout::kHWC, 2, 2, 0),
      Make(DType::kFloat32, Layout::kHWC, 32768, 32768, 1),  // exactly 4 GiB per sample
  };
  for (const TensorSchema& s : bad) {
    Status st = s.Validate();
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << s.ShapeString();
    EXPECT_FALSE(st.message().empty());
  }
}

}  // namespace
}  // namespace kiln
