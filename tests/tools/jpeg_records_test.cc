// JPEG records end to end (`kiln pack --codec jpeg:QUALITY --max-side N`, issue 31 item 2): the
// converter's encoder, the shard header flag and manifest version 3, the reader's decoder in
// every order, on two ranks, across a resume and on both io paths, pixels against the source
// photos, damaged records named by the loader and by deep verification, and the golden dataset
// tests/data/golden-jpeg (its bytes as formats/shards/shard_format.md section 12 states them,
// and what it decodes to).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <opencv2/imgcodecs.hpp>
#include <opencv2/imgproc.hpp>
#include <set>
#include <string>
#include <vector>

#include "formats/dataset.h"
#include "formats/dataset_writer.h"
#include "formats/manifest.h"
#include "formats/shards/shard_dataset.h"
#include "formats/shards/shard_format.h"
#include "formats/shards/shard_reader.h"
#include "formats/verifier.h"
#include "formats/xxh3.h"
#include "reader/jpeg_sample_decoder.h"
#include "reader/loader.h"
#include "tests/test_util.h"
#include "tests/tools/shell_run.h"
#include "tools/imaging/image_decoder.h"
#include "tools/imaging/jpeg_encoder.h"
#include "tools/pack/packer.h"

namespace kiln {
namespace {

const std::string kPhotos = std::string(KILN_SOURCE_DIR) + "/samples/photos";
const std::string kGoldenJpeg = std::string(KILN_SOURCE_DIR) + "/tests/data/golden-jpeg";
constexpr uint32_t kMaxSide = 96;

PackOptions JpegPackOptions(const std::string& input, const std::string& output) {
  PackOptions o;
  o.input = input;
  o.output = output;
  o.threads = 2;
  o.jpeg.quality = 90;
  o.jpeg.max_side = kMaxSide;
  o.preprocess.schema = {DType::kUint8, Layout::kHWC, kMaxSide, kMaxSide, 3};
  return o;
}

// The photos packed once for the whole suite (23 images, 4 classes).
class JpegRecordsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::string(std::filesystem::temp_directory_path() /
                           ("kiln_jpeg_records_" + std::to_string(::getpid())));
    std::filesystem::remove_all(*dir_);
    std::filesystem::create_directories(*dir_);
    Result<PackReport> r = Pack(JpegPackOptions(kPhotos, *dir_ + "/ds"));
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    ASSERT_EQ(r->packed, 23u);
  }
  static void TearDownTestSuite() {
    std::filesystem::remove_all(*dir_);
    delete dir_;
  }
  static std::string Dataset() { return *dir_ + "/ds"; }

  static LoaderOptions Rrc(ShuffleMode mode, uint32_t threads = 2) {
    LoaderOptions o;
    o.batch_size = 5;
    o.shuffle = mode;
    o.num_threads = threads;
    o.seed = 11;
    o.block_bytes = 3 * kMaxSide * kMaxSide * 3;  // blocks of 3 samples
    o.shuffle_window = 2;
    o.augment.resize_height = 40;
    o.augment.resize_width = 48;
    o.augment.flip = true;
    o.io = IoMode::kMmap;
    return o;
  }

  static std::string* dir_;
};
std::string* JpegRecordsTest::dir_ = nullptr;

// Every batch of one epoch: the bytes, the labels and the sample indices, in order.
struct Epoch {
  std::vector<uint8_t> bytes;
  std::vector<int64_t> labels;
  std::vector<uint64_t> indices;
};

Epoch ReadEpoch(Loader& loader, size_t max_batches = SIZE_MAX) {
  Epoch e;
  Batch b;
  for (size_t n = 0; n < max_batches; ++n) {
    Result<bool> more = loader.Next(&b);
    EXPECT_TRUE(more.ok()) << more.status().ToString();
    if (!more.ok() || !*more) break;
    e.bytes.insert(e.bytes.end(), b.data, b.data + b.bytes());
    e.labels.insert(e.labels.end(), b.labels, b.labels + b.size);
    e.indices.insert(e.indices.end(), b.sample_indices, b.sample_indices + b.size);
  }
  return e;
}

Epoch ReadEpoch(const std::string& dir, const LoaderOptions& o) {
  Result<std::unique_ptr<Loader>> loader = Loader::Open(dir, o);
  EXPECT_TRUE(loader.ok()) << loader.status().ToString();
  if (!loader.ok()) return {};
  return ReadEpoch(**loader);
}

TEST_F(JpegRecordsTest, ShardAndManifestMarkJpegRecords) {
  const std::vector<uint8_t> b = testing::ReadFileBytes(Dataset() + "/shard-00000.kiln");
  ASSERT_GE(b.size(), 128u);
  EXPECT_EQ(LoadLE32(b.data() + 12), kShardFlagJpegRecords);  // flags
  EXPECT_EQ(LoadLE32(b.data() + 48), kMaxSide);               // max side
  Result<Manifest> m = Manifest::Read(Dataset());
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ(m->jpeg_max_side, kMaxSide);
  EXPECT_EQ(m->jpeg_quality, 90);
  EXPECT_NE(testing::ReadFileString(Dataset() + "/kiln.json").find("\"kiln_manifest_version\": 3"),
            std::string::npos);
  // Every record: codec jpeg, an image of at most the max side, labels of the 4 classes.
  auto shard = ShardReader::Open(Dataset() + "/shard-00000.kiln");
  ASSERT_TRUE(shard.ok()) << shard.status().ToString();
  JpegSampleDecoder decoder(3, kMaxSide);
  for (uint64_t i = 0; i < (*shard)->record_count(); ++i) {
    const ShardIndexEntry e = (*shard)->entry(i);
    EXPECT_EQ(e.codec, Codec::kJpeg);
    Result<JpegInfo> info = decoder.ReadInfo((*shard)->stored(e), e.stored_size);
    ASSERT_TRUE(info.ok()) << info.status().ToString();
    // Photos larger than the max side are shrunk to it; the 50x70 letters keep their size.
    EXPECT_LE(std::max(info->width, info->height), kMaxSide) << "record " << i;
    EXPECT_GE(std::max(info->width, info->height), 70u) << "record " << i;
    EXPECT_EQ(e.raw_size, info->width * info->height * 3);
  }
  // A header with a flag this kiln does not know is refused by name, as a 1.0 reader refuses
  // bit 0: the rule that keeps old readers from misreading JPEG shards.
  std::vector<uint8_t> h(b.begin(), b.begin() + 64);
  StoreLE32(h.data() + 12, 3);
  StoreLE64(h.data() + 56, Xxh3(h.data(), 56));
  Result<ShardHeader> refused = DecodeShardHeader(h.data());
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("nonzero header flags 0x00000003"), std::string::npos);
}

TEST_F(JpegRecordsTest, RawDatasetsKeepVersion2AndZeroFlags) {
  TempDir tmp;
  PackOptions o = JpegPackOptions(kPhotos, tmp / "raw");
  o.jpeg = JpegRecordOptions{};
  o.preprocess.schema = {DType::kUint8, Layout::kHWC, 32, 32, 3};
  Result<PackReport> r = Pack(o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const std::string json = testing::ReadFileString(tmp / "raw/kiln.json");
  EXPECT_NE(json.find("\"kiln_manifest_version\": 2"), std::string::npos);
  EXPECT_EQ(json.find("records"), std::string::npos);
  EXPECT_EQ(json.find("max_side"), std::string::npos);
  const std::vector<uint8_t> b = testing::ReadFileBytes(tmp / "raw/shard-00000.kiln");
  EXPECT_EQ(LoadLE32(b.data() + 12), 0u);
  EXPECT_EQ(LoadLE64(b.data() + 48), 0u);
  VerifyOptions deep;
  deep.deep = true;
  EXPECT_TRUE(VerifyDataset(tmp / "raw", deep).ok());
}

TEST_F(JpegRecordsTest, LoaderNeedsAnOutputSize) {
  LoaderOptions o;
  o.num_threads = 1;
  Result<std::unique_ptr<Loader>> loader = Loader::Open(Dataset(), o);
  ASSERT_FALSE(loader.ok());
  EXPECT_EQ(loader.status().code(), StatusCode::kInvalidArgument);
  const std::string m = loader.status().message();
  EXPECT_NE(m.find("resize_height"), std::string::npos) << m;
  EXPECT_NE(m.find("center_crop_height"), std::string::npos) << m;
  EXPECT_NE(m.find("random_resized_crop="), std::string::npos) << m;
  // A plain random crop is not an output size either.
  o.augment.crop_height = o.augment.crop_width = 32;
  EXPECT_FALSE(Loader::Open(Dataset(), o).ok());
  // Mixtures of JPEG-record datasets are refused by name (not supported yet).
  o.augment = AugmentOptions{};
  o.augment.resize_height = o.augment.resize_width = 32;
  MixtureOptions mix;
  mix.repeats = {1.0, 1.0};
  Result<std::unique_ptr<Loader>> mixed = Loader::OpenMixture({Dataset(), Dataset()}, mix, o);
  ASSERT_FALSE(mixed.ok());
  EXPECT_EQ(mixed.status().code(), StatusCode::kNotSupported);
  EXPECT_NE(mixed.status().message().find("mixture of JPEG-record datasets"), std::string::npos)
      << mixed.status().message();
}

TEST_F(JpegRecordsTest, EveryOrderServesEverySampleOnceAndIsThreadIndependent) {
  for (ShuffleMode mode : {ShuffleMode::kNone, ShuffleMode::kBlock, ShuffleMode::kExact}) {
    SCOPED_TRACE(static_cast<int>(mode));
    const Epoch one = ReadEpoch(Dataset(), Rrc(mode, 1));
    const Epoch two = ReadEpoch(Dataset(), Rrc(mode, 2));
    ASSERT_EQ(one.indices.size(), 23u);
    EXPECT_EQ(std::set<uint64_t>(one.indices.begin(), one.indices.end()).size(), 23u);
    EXPECT_EQ(one.bytes.size(), 23u * 40 * 48 * 3);
    EXPECT_EQ(one.bytes, two.bytes);
    EXPECT_EQ(one.indices, two.indices);
    if (mode == ShuffleMode::kNone) {
      for (uint64_t k = 0; k < one.indices.size(); ++k) EXPECT_EQ(one.indices[k], k);
    }
  }
}

TEST_F(JpegRecordsTest, DirectIoReadsTheSameBatchesAsMmap) {
  LoaderOptions o = Rrc(ShuffleMode::kExact);
  const Epoch mapped = ReadEpoch(Dataset(), o);
  o.io = IoMode::kDirect;
  Result<std::unique_ptr<Loader>> loader = Loader::Open(Dataset(), o);
  ASSERT_TRUE(loader.ok()) << loader.status().ToString();
  if ((*loader)->io_path() != IoMode::kDirect) {
    GTEST_SKIP() << "no direct reads here: " << (*loader)->io_reason();
  }
  const Epoch direct = ReadEpoch(**loader);
  EXPECT_EQ(direct.bytes, mapped.bytes);
  EXPECT_EQ(direct.indices, mapped.indices);
}

TEST_F(JpegRecordsTest, TwoRanksSplitTheEpochAndDrawTheSameCrops) {
  const LoaderOptions base = Rrc(ShuffleMode::kExact);
  const Epoch whole = ReadEpoch(Dataset(), base);
  const size_t sample_bytes = 40 * 48 * 3;
  std::map<uint64_t, std::vector<uint8_t>> by_index;
  for (size_t k = 0; k < whole.indices.size(); ++k) {
    by_index[whole.indices[k]].assign(whole.bytes.begin() + k * sample_bytes,
                                      whole.bytes.begin() + (k + 1) * sample_bytes);
  }
  std::set<uint64_t> seen;
  for (uint32_t rank = 0; rank < 2; ++rank) {
    LoaderOptions o = base;
    o.world_size = 2;
    o.rank = rank;
    const Epoch e = ReadEpoch(Dataset(), o);
    for (size_t k = 0; k < e.indices.size(); ++k) {
      seen.insert(e.indices[k]);
      // A crop is drawn from (seed, epoch, sample), not from the rank.
      EXPECT_TRUE(std::equal(e.bytes.begin() + k * sample_bytes,
                             e.bytes.begin() + (k + 1) * sample_bytes,
                             by_index[e.indices[k]].begin()))
          << "rank " << rank << " sample " << e.indices[k];
    }
  }
  EXPECT_EQ(seen.size(), 23u);
}

TEST_F(JpegRecordsTest, ResumeMidEpochIsByteIdentical) {
  for (ShuffleMode mode : {ShuffleMode::kExact, ShuffleMode::kBlock}) {
    SCOPED_TRACE(static_cast<int>(mode));
    LoaderOptions o = Rrc(mode);
    o.start_epoch = 1;
    const Epoch full = ReadEpoch(Dataset(), o);
    Result<std::unique_ptr<Loader>> first = Loader::Open(Dataset(), o);
    ASSERT_TRUE(first.ok()) << first.status().ToString();
    const Epoch head = ReadEpoch(**first, 2);
    const ReaderState state = (*first)->state();
    first->reset();
    LoaderOptions r = o;
    r.resume = state;
    Result<std::unique_ptr<Loader>> second = Loader::Open(Dataset(), r);
    ASSERT_TRUE(second.ok()) << second.status().ToString();
    const Epoch tail = ReadEpoch(**second);
    std::vector<uint8_t> joined = head.bytes;
    joined.insert(joined.end(), tail.bytes.begin(), tail.bytes.end());
    EXPECT_EQ(joined, full.bytes);
    // Another output size is another augmentation: refused.
    r.augment.resize_width = 40;
    EXPECT_FALSE(Loader::Open(Dataset(), r).ok());
  }
}

// Mean and max absolute difference of two equal-size byte arrays.
struct Difference {
  double mean = 0;
  int max = 0;
};
Difference Compare(const uint8_t* a, const uint8_t* b, size_t n) {
  Difference d;
  double sum = 0;
  for (size_t i = 0; i < n; ++i) {
    const int v = std::abs(static_cast<int>(a[i]) - static_cast<int>(b[i]));
    sum += v;
    d.max = std::max(d.max, v);
  }
  d.mean = n == 0 ? 0 : sum / static_cast<double>(n);
  return d;
}

// The source photo as the converter sees it, resized to the record's size (INTER_AREA).
cv::Mat SourceAtRecordSize(const std::string& key) {
  const std::string bytes = testing::ReadFileString(kPhotos + "/" + key);
  DecodeOptions d;
  Result<cv::Mat> image = DecodeImage(bytes, key, d);
  EXPECT_TRUE(image.ok()) << image.status().ToString();
  if (!image.ok()) return {};
  const cv::Size size = JpegRecordSize(image->cols, image->rows, kMaxSide);
  cv::Mat out;
  cv::resize(*image, out, size, 0, 0, cv::INTER_AREA);
  return out;
}

TEST_F(JpegRecordsTest, DecodedPixelsAreCloseToTheSourcePhotos) {
  Result<std::unique_ptr<kiln::Dataset>> ds = kiln::Dataset::Open(Dataset());
  ASSERT_TRUE(ds.ok()) << ds.status().ToString();
  const auto& shards = static_cast<const ShardDataset&>(**ds);
  const ShardReader& shard = shards.shard(0);
  JpegSampleDecoder full(3, kMaxSide);
  // Whole records against the source at the record's size: JPEG at quality 90 (4:2:0 chroma)
  // and shrink-on-load only. Measured here: worst mean |diff| 6.04 (baboon.jpg, fur texture
  // at 96 pixels), 3.1 over all pixels, max 102 on a sharp colour edge.
  double worst_mean = 0, sum_diff = 0;
  size_t all_bytes = 0;
  int worst_max = 0;
  for (uint64_t i = 0; i < shard.record_count(); ++i) {
    const ShardIndexEntry e = shard.entry(i);
    const std::string key(shard.key(e));
    std::vector<uint8_t> pixels;
    Result<JpegInfo> info = full.DecodeFull(shard.stored(e), e.stored_size, &pixels);
    ASSERT_TRUE(info.ok()) << key << ": " << info.status().ToString();
    const cv::Mat src = SourceAtRecordSize(key);
    ASSERT_EQ(src.cols, static_cast<int>(info->width)) << key;
    ASSERT_EQ(src.rows, static_cast<int>(info->height)) << key;
    const Difference d = Compare(pixels.data(), src.data, pixels.size());
    worst_mean = std::max(worst_mean, d.mean);
    worst_max = std::max(worst_max, d.max);
    sum_diff += d.mean * static_cast<double>(pixels.size());
    all_bytes += pixels.size();
    EXPECT_LT(d.mean, 8.0) << key;
  }
  const double overall = sum_diff / static_cast<double>(all_bytes);
  std::printf("whole records vs source: mean |diff| %.2f, worst record mean %.2f, max %d\n",
              overall, worst_mean, worst_max);
  EXPECT_LT(overall, 4.5);
  EXPECT_LT(worst_max, 160);
  // The loader's center crop (ratio 1, output 48x48: a scaled IDCT and a crop of iMCU columns)
  // against the same box resized from the source at the record's size.
  LoaderOptions o;
  o.batch_size = 23;
  o.shuffle = ShuffleMode::kNone;
  o.num_threads = 2;
  o.augment.center_crop_height = o.augment.center_crop_width = 48;
  o.augment.center_crop_ratio = 1.0;
  const Epoch e = ReadEpoch(Dataset(), o);
  ASSERT_EQ(e.indices.size(), 23u);
  double crop_worst_mean = 0;
  for (uint64_t i = 0; i < 23; ++i) {
    const std::string key = *(*ds)->Key(i);
    const cv::Mat src = SourceAtRecordSize(key);
    const CropBox box = CenterCropBox(src.rows, src.cols, o.augment);
    const TensorSchema stored{DType::kUint8, Layout::kHWC, static_cast<uint32_t>(src.rows),
                              static_cast<uint32_t>(src.cols), 3};
    std::vector<uint8_t> expected(48 * 48 * 3);
    std::vector<float> rows(2 * 48 * 3);
    ResizeCropBilinear(src.data, stored, box, 48, 48, false, expected.data(), rows.data());
    const Difference d =
        Compare(e.bytes.data() + i * expected.size(), expected.data(), expected.size());
    crop_worst_mean = std::max(crop_worst_mean, d.mean);
    EXPECT_LT(d.mean, 9.0) << key;
  }
  EXPECT_LT(crop_worst_mean, 9.0);
  std::printf("loader center crop vs source: worst mean |diff| %.2f\n", crop_worst_mean);
}

TEST_F(JpegRecordsTest, ScaledIdctIsUsedWhenTheCropAllowsIt) {
  Result<std::unique_ptr<kiln::Dataset>> ds = kiln::Dataset::Open(Dataset());
  ASSERT_TRUE(ds.ok());
  const ShardReader& shard = static_cast<const ShardDataset&>(**ds).shard(0);
  const ShardIndexEntry e = shard.entry(0);
  AugmentOptions a;
  a.center_crop_height = a.center_crop_width = 16;
  a.center_crop_ratio = 1.0;
  JpegSampleDecoder small(3, a, 16, 16, 0, kMaxSide);
  std::vector<uint8_t> out(16 * 16 * 3);
  ASSERT_TRUE(small.DecodeImage(shard.stored(e), e.stored_size, e.raw_size, out.data()).ok());
  EXPECT_LT(small.last_scale_num(), 8u);  // a 96-pixel box for 16 pixels: 1/4 at least
  a.center_crop_height = a.center_crop_width = 90;
  JpegSampleDecoder large(3, a, 90, 90, 0, kMaxSide);
  out.resize(90 * 90 * 3);
  ASSERT_TRUE(large.DecodeImage(shard.stored(e), e.stored_size, e.raw_size, out.data()).ok());
  EXPECT_EQ(large.last_scale_num(), 8u);
}

// Writes a JPEG-record dataset of the photos' first three records, record 1 replaced by
// `damaged` (with a valid checksum: damage before the checksum was taken, which only decoding
// can find).
std::string WriteWithDamagedJpeg(const TempDir& tmp, const std::string& source,
                                 const std::vector<uint8_t>& damaged) {
  Result<std::unique_ptr<kiln::Dataset>> ds = kiln::Dataset::Open(source);
  EXPECT_TRUE(ds.ok());
  const ShardReader& shard = static_cast<const ShardDataset&>(**ds).shard(0);
  DatasetWriterOptions wo;
  wo.schema = (*ds)->schema();
  wo.jpeg_max_side = kMaxSide;
  const std::string out = tmp / "damaged";
  auto writer = DatasetWriter::Create(out, wo);
  EXPECT_TRUE(writer.ok()) << writer.status().ToString();
  for (uint64_t i = 0; i < 3; ++i) {
    const ShardIndexEntry e = shard.entry(i);
    EncodedRecord r;
    r.stored.assign(shard.stored(e), shard.stored(e) + e.stored_size);
    if (i == 1) r.stored = damaged;
    r.raw_size = e.raw_size;
    r.codec = Codec::kJpeg;
    r.label = e.label;
    r.key = std::string(shard.key(e));
    r.checksum = RecordChecksum(r.stored.data(), r.stored.size(), r.label);
    EXPECT_TRUE((*writer)->Add(r).ok());
  }
  Manifest m;
  m.jpeg_quality = 90;
  m.classes = (*ds)->manifest().classes;
  EXPECT_TRUE((*writer)->Finish(m).ok());
  return out;
}

TEST_F(JpegRecordsTest, DamagedJpegIsNamedByTheLoaderAndByDeepVerify) {
  Result<std::unique_ptr<kiln::Dataset>> ds = kiln::Dataset::Open(Dataset());
  ASSERT_TRUE(ds.ok());
  const ShardReader& shard = static_cast<const ShardDataset&>(**ds).shard(0);
  const ShardIndexEntry e1 = shard.entry(1);
  const std::vector<uint8_t> whole(shard.stored(e1), shard.stored(e1) + e1.stored_size);
  std::vector<uint8_t> truncated(whole.begin(), whole.begin() + whole.size() / 2);
  std::vector<uint8_t> garbage(whole.size(), 0x5a);
  std::vector<uint8_t> flipped = whole;  // entropy data damaged past the headers
  for (size_t k = whole.size() / 2; k < whole.size() / 2 + 64; ++k) flipped[k] ^= 0xff;
  for (const auto& [name, bytes] : std::vector<std::pair<std::string, std::vector<uint8_t>>>{
           {"truncated", truncated}, {"garbage", garbage}, {"flipped", flipped}}) {
    SCOPED_TRACE(name);
    TempDir tmp;
    const std::string dir = WriteWithDamagedJpeg(tmp, Dataset(), bytes);
    LoaderOptions o;
    o.batch_size = 1;
    o.shuffle = ShuffleMode::kNone;
    o.num_threads = 1;
    o.augment.center_crop_height = o.augment.center_crop_width = 32;
    o.augment.center_crop_ratio = 1.0;  // the whole image: every row is decoded
    for (IoMode io : {IoMode::kMmap, IoMode::kDirect}) {
      o.io = io;
      Result<std::unique_ptr<Loader>> loader = Loader::Open(dir, o);
      ASSERT_TRUE(loader.ok()) << loader.status().ToString();
      Batch b;
      ASSERT_TRUE((*loader)->Next(&b).ok());
      Result<bool> bad = (*loader)->Next(&b);
      ASSERT_FALSE(bad.ok()) << "record 1 decoded";
      EXPECT_EQ(bad.status().code(), StatusCode::kCorruption);
      const std::string m = bad.status().message();
      EXPECT_NE(m.find("shard-00000.kiln record 1 (offset "), std::string::npos) << m;
      EXPECT_NE(m.find("JPEG"), std::string::npos) << m;
      EXPECT_EQ(bad.status().location().record, 1);
      Result<bool> next = (*loader)->Next(&b);  // the loader goes on with the next batch
      EXPECT_TRUE(next.ok() && *next) << next.status().ToString();
    }
    VerifyOptions vo;
    vo.deep = true;
    vo.image_decoder = std::make_shared<JpegSampleDecoder>(0);
    const VerifyReport deep = VerifyDataset(dir, vo);
    ASSERT_EQ(deep.problems.size(), 1u) << VerifyReportToText(deep);
    EXPECT_EQ(deep.problems[0].record, 1);
    EXPECT_GT(deep.problems[0].offset, 0);
    EXPECT_NE(deep.problems[0].reason.find("cannot decode: JPEG"), std::string::npos)
        << deep.problems[0].reason;
    EXPECT_TRUE(
        VerifyDataset(dir, VerifyOptions{}).ok());  // checksums hold: only decoding finds it
  }
}

TEST_F(JpegRecordsTest, FlippedByteIsAChecksumErrorNamingTheRecord) {
  TempDir tmp;
  const std::string dir = tmp / "flipped";
  std::filesystem::copy(Dataset(), dir);
  Result<std::unique_ptr<kiln::Dataset>> ds = kiln::Dataset::Open(Dataset());
  ASSERT_TRUE(ds.ok());
  const ShardIndexEntry e = static_cast<const ShardDataset&>(**ds).shard(0).entry(7);
  std::vector<uint8_t> b = testing::ReadFileBytes(dir + "/shard-00000.kiln");
  b[e.offset + e.stored_size / 2] ^= 0x10;
  testing::WriteFileBytes(dir + "/shard-00000.kiln", b);
  LoaderOptions o = Rrc(ShuffleMode::kNone, 1);
  Result<std::unique_ptr<Loader>> loader = Loader::Open(dir, o);
  ASSERT_TRUE(loader.ok());
  Batch batch;
  ASSERT_TRUE((*loader)->Next(&batch).ok());  // samples 0..4
  Result<bool> bad = (*loader)->Next(&batch);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("record 7 (offset " + std::to_string(e.offset) +
                                        "): checksum mismatch"),
            std::string::npos)
      << bad.status().message();
  const VerifyReport report = VerifyDataset(dir, VerifyOptions{});
  bool named = false;
  for (const VerifyProblem& p : report.problems) named |= p.record == 7;
  EXPECT_TRUE(named) << VerifyReportToText(report);
}

TEST_F(JpegRecordsTest, PackRefusesOptionsJpegRecordsCannotHold) {
  TempDir tmp;
  PackOptions o = JpegPackOptions(kPhotos, tmp / "x");
  o.format = "lmdb";
  EXPECT_FALSE(ValidatePackOptions(o).ok());
  o = JpegPackOptions(kPhotos, tmp / "x");
  o.compression.codec = Codec::kZstd;
  EXPECT_FALSE(ValidatePackOptions(o).ok());
  o = JpegPackOptions(kPhotos, tmp / "x");
  o.preprocess.schema.layout = Layout::kCHW;
  EXPECT_FALSE(ValidatePackOptions(o).ok());
  o = JpegPackOptions(kPhotos, tmp / "x");
  o.preprocess.schema.height = 64;
  EXPECT_FALSE(ValidatePackOptions(o).ok());
  EXPECT_TRUE(ValidatePackOptions(JpegPackOptions(kPhotos, tmp / "x")).ok());
}

// `kiln pack --codec` and `kiln verify --deep` as a user runs them.
testing::ShellRun Kiln(const std::string& args) {
  return testing::RunShellCapturingStderr(std::string(KILN_BINARY_DIR) + "/tools/kiln " + args);
}

TEST_F(JpegRecordsTest, CliPacksVerifiesAndRefusesBadFlags) {
  TempDir tmp;
  testing::ShellRun r =
      Kiln("pack " + kPhotos + " " + tmp / "a" + " --codec jpeg:80 --max-side 64");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  Result<Manifest> m = Manifest::Read(tmp / "a");
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->jpeg_quality, 80);
  EXPECT_EQ(m->jpeg_max_side, 64u);
  r = Kiln("verify --deep " + tmp / "a");
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("deep: every record decoded"), std::string::npos) << r.out;
  r = Kiln("pack " + kPhotos + " " + tmp / "b" + " --codec jpeg");
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("needs --max-side"), std::string::npos) << r.err;
  r = Kiln("pack " + kPhotos + " " + tmp / "b" + " --codec jpeg:101 --max-side 64");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("[1, 100]"), std::string::npos) << r.err;
  r = Kiln("pack " + kPhotos + " " + tmp / "b" + " --codec jpeg --max-side 64 --size 32");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--size does not apply"), std::string::npos) << r.err;
  r = Kiln("pack " + kPhotos + " " + tmp / "b" + " --codec jpeg --max-side 64 --compress zstd");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("excludes --compress"), std::string::npos) << r.err;
  r = Kiln("pack " + kPhotos + " " + tmp / "b" + " --max-side 64");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--max-side applies to --codec jpeg only"), std::string::npos) << r.err;
  // A record damaged before its checksum was taken: only --deep finds it, naming it.
  Result<std::unique_ptr<kiln::Dataset>> ds = kiln::Dataset::Open(Dataset());
  ASSERT_TRUE(ds.ok());
  const ShardReader& shard = static_cast<const ShardDataset&>(**ds).shard(0);
  const ShardIndexEntry e1 = shard.entry(1);
  const std::vector<uint8_t> half(shard.stored(e1), shard.stored(e1) + e1.stored_size / 2);
  const std::string damaged = WriteWithDamagedJpeg(tmp, Dataset(), half);
  EXPECT_EQ(Kiln("verify " + damaged).exit_code, 0);
  r = Kiln("verify --deep " + damaged);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.out.find("shard-00000.kiln record 1 offset "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("cannot decode: JPEG: "), std::string::npos) << r.out;
}

// Grey records: one-component JPEGs, read as 1-channel batches.
// `kiln show` on JPEG records: the whole images (each at the top left of a max side tile), and
// `--draws` tiles equal to the loader's samples epoch by epoch (its own JPEG decoder draws them);
// --draws without --random-resized-crop is a usage error naming the option.
TEST_F(JpegRecordsTest, ShowDrawsWholeImagesAndTheLoadersDraws) {
  TempDir tmp;
  const std::string grid = tmp / "grid.png", draws_png = tmp / "draws.png";
  testing::ShellRun r = Kiln("show " + Dataset() + " -o " + grid);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const cv::Mat whole = cv::imread(grid, cv::IMREAD_COLOR);
  ASSERT_FALSE(whole.empty());
  EXPECT_GE(whole.cols, static_cast<int>(kMaxSide));
  const uint64_t index = 3;
  const uint32_t draws = 4, side = 48;
  r = Kiln("show " + Dataset() + " --index " + std::to_string(index) + " --draws " +
           std::to_string(draws) + " --random-resized-crop " + std::to_string(side) +
           " --flip --seed 11 -o " + draws_png);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const cv::Mat image = cv::imread(draws_png, cv::IMREAD_COLOR);  // BGR
  ASSERT_FALSE(image.empty());
  const int scale = 2;            // 48-pixel tiles are enlarged to at least 96 pixels
  const int tile_w = 48 * scale;  // 96 >= the 80-pixel minimum
  ASSERT_EQ(image.cols, static_cast<int>(draws) * tile_w);
  std::set<std::vector<uint8_t>> distinct;
  for (uint32_t e = 0; e < draws; ++e) {
    LoaderOptions o;
    o.batch_size = 1;
    o.shuffle = ShuffleMode::kNone;
    o.num_threads = 1;
    o.seed = 11;
    o.start_epoch = e;
    o.augment.resize_height = o.augment.resize_width = side;
    o.augment.flip = true;
    Result<std::unique_ptr<Loader>> loader = Loader::Open(Dataset(), o);
    ASSERT_TRUE(loader.ok()) << loader.status().ToString();
    Batch b;
    for (uint64_t i = 0; i <= index; ++i) {
      Result<bool> more = (*loader)->Next(&b);
      ASSERT_TRUE(more.ok() && *more);
    }
    ASSERT_EQ(b.sample_indices[0], index);
    std::vector<uint8_t> tile(size_t(side) * side * 3);
    for (uint32_t y = 0; y < side; ++y) {
      for (uint32_t x = 0; x < side; ++x) {
        const cv::Vec3b bgr =
            image.at<cv::Vec3b>(static_cast<int>(y) * scale,
                                static_cast<int>(e) * tile_w + static_cast<int>(x) * scale);
        uint8_t* rgb = &tile[(size_t(y) * side + x) * 3];
        rgb[0] = bgr[2];
        rgb[1] = bgr[1];
        rgb[2] = bgr[0];
      }
    }
    EXPECT_EQ(tile, std::vector<uint8_t>(b.data, b.data + tile.size())) << "epoch " << e;
    distinct.insert(tile);
  }
  EXPECT_EQ(distinct.size(), draws) << "two epochs drew alike";
  r = Kiln("show " + Dataset() + " --index 3 --draws 2 --flip -o " + draws_png);
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("--random-resized-crop"), std::string::npos) << r.err;
}

// Field case B06 in the encoded storage mode: a grey (single-component) JPEG among colour ones,
// packed as JPEG records of a colour dataset, reads as three equal channels of its value, in one
// batch of 4 samples of uniform shape.
TEST(JpegRecordsFieldCases, FieldCase_B06_GreyJpegAmongColourRecordsHasThreeEqualChannels) {
  TempDir tmp;
  const std::string input = tmp / "in", output = tmp / "ds";
  std::filesystem::create_directories(input + "/c");
  ASSERT_TRUE(cv::imwrite(input + "/c/a.jpg", cv::Mat(8, 8, CV_8UC3, cv::Scalar(10, 120, 230))));
  ASSERT_TRUE(cv::imwrite(input + "/c/b.jpg", cv::Mat(8, 8, CV_8UC3, cv::Scalar(200, 30, 90))));
  ASSERT_TRUE(cv::imwrite(input + "/c/c.jpg", cv::Mat(8, 8, CV_8UC3, cv::Scalar(60, 60, 180))));
  ASSERT_TRUE(cv::imwrite(input + "/c/d.jpg", cv::Mat(8, 8, CV_8UC1, cv::Scalar(100))));
  const std::vector<uint8_t> grey = testing::ReadFileBytes(input + "/c/d.jpg");
  const std::string grey_jpeg(grey.begin(), grey.end());
  const size_t sof = grey_jpeg.find("\xFF\xC0");
  ASSERT_NE(sof, std::string::npos);
  ASSERT_EQ(grey_jpeg[sof + 9], 1) << "d.jpg is not a single-component JPEG";

  PackOptions po = JpegPackOptions(input, output);
  po.jpeg.max_side = 8;
  po.preprocess.schema = {DType::kUint8, Layout::kHWC, 8, 8, 3};
  Result<PackReport> packed = Pack(po);
  ASSERT_TRUE(packed.ok()) << packed.status().ToString();
  ASSERT_EQ(packed->packed, 4u);

  LoaderOptions o;
  o.batch_size = 4;
  o.shuffle = ShuffleMode::kNone;
  o.num_threads = 1;
  o.augment.center_crop_height = o.augment.center_crop_width = 8;
  o.augment.center_crop_ratio = 1.0;  // the whole 8x8 image
  Result<std::unique_ptr<Loader>> loader = Loader::Open(output, o);
  ASSERT_TRUE(loader.ok()) << loader.status().ToString();
  Batch b;
  Result<bool> more = (*loader)->Next(&b);
  ASSERT_TRUE(more.ok() && *more) << more.status().ToString();
  ASSERT_EQ(b.size, 4u);
  ASSERT_EQ(b.bytes(), 4u * 8 * 8 * 3);
  ASSERT_EQ(b.sample_indices[3], 3u);
  Result<std::string> key = (*loader)->dataset().Key(3);
  ASSERT_TRUE(key.ok()) << key.status().ToString();
  EXPECT_EQ(*key, "c/d.jpg");
  const uint8_t* d = b.data + 3 * 8 * 8 * 3;
  for (int px = 0; px < 64; ++px) {
    EXPECT_EQ(d[px * 3], d[px * 3 + 1]) << "pixel " << px;
    EXPECT_EQ(d[px * 3], d[px * 3 + 2]) << "pixel " << px;
    EXPECT_NEAR(d[px * 3], 100, 1) << "pixel " << px;
  }
  // The colour records keep colour: a.jpg (BGR 10, 120, 230) is red-dominant in RGB.
  EXPECT_GT(b.data[0], b.data[2] + 100);
  more = (*loader)->Next(&b);
  ASSERT_TRUE(more.ok());
  EXPECT_FALSE(*more);
}

TEST_F(JpegRecordsTest, GreyRecordsReadAsOneChannel) {
  TempDir tmp;
  PackOptions o = JpegPackOptions(kPhotos, tmp / "grey");
  o.preprocess.schema.channels = 1;
  Result<PackReport> r = Pack(o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  auto shard = ShardReader::Open(tmp / "grey/shard-00000.kiln");
  ASSERT_TRUE(shard.ok());
  JpegSampleDecoder decoder(1, kMaxSide);
  const ShardIndexEntry e = (*shard)->entry(0);
  Result<JpegInfo> info = decoder.ReadInfo((*shard)->stored(e), e.stored_size);
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->components, 1u);
  EXPECT_EQ(e.raw_size, info->width * info->height);
  LoaderOptions lo = Rrc(ShuffleMode::kExact);
  const Epoch epoch = ReadEpoch(tmp / "grey", lo);
  EXPECT_EQ(epoch.bytes.size(), 23u * 40 * 48);
  VerifyOptions vo;
  vo.deep = true;
  vo.image_decoder = std::make_shared<JpegSampleDecoder>(0);
  EXPECT_TRUE(VerifyDataset(tmp / "grey", vo).ok());
}

// Partitioned packing: two parts merged equal one pack that closes a shard at the same place,
// byte for byte, and the merged shards keep the JPEG flag (kiln merge rewrites only shard_index
// and first_sample in each header).
TEST_F(JpegRecordsTest, PartsMergeIntoTheSameBytesAsOnePack) {
  TempDir tmp;
  const std::string flags = " --codec jpeg:90 --max-side 64 --threads 2";
  ASSERT_EQ(Kiln("pack " + kPhotos + " " + tmp / "whole" + flags + " --of 2").exit_code, 0);
  for (int part = 0; part < 2; ++part) {
    testing::ShellRun r = Kiln("pack " + kPhotos + " " + tmp / "parted" + flags + " --part " +
                               std::to_string(part) + " --of 2");
    ASSERT_EQ(r.exit_code, 0) << r.err;
  }
  testing::ShellRun r = Kiln("merge " + tmp / "parted.parts" + " " + tmp / "parted");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (const char* shard : {"shard-00000.kiln", "shard-00001.kiln"}) {
    const std::vector<uint8_t> a = testing::ReadFileBytes(tmp / "whole/" + std::string(shard));
    ASSERT_FALSE(a.empty()) << shard;
    EXPECT_EQ(a, testing::ReadFileBytes(tmp / "parted/" + std::string(shard))) << shard;
    EXPECT_EQ(LoadLE32(a.data() + 12), kShardFlagJpegRecords);
  }
  Result<Manifest> m = Manifest::Read(tmp / "parted");
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ(m->jpeg_max_side, 64u);
  EXPECT_EQ(m->jpeg_quality, 90);
  EXPECT_EQ(ReadEpoch(tmp / "parted", Rrc(ShuffleMode::kExact)).bytes,
            ReadEpoch(tmp / "whole", Rrc(ShuffleMode::kExact)).bytes);
}

// ---- The golden dataset tests/data/golden-jpeg (formats/shards/shard_format.md section 12) ----

// Its two images: 16x8 (W x H) colour, left half red (200, 30, 30) and right half blue
// (20, 40, 220); 8x12 grey... stored as colour: a vertical ramp 20 + 15 * row.
std::vector<cv::Mat> GoldenImages() {
  cv::Mat a(8, 16, CV_8UC3);
  for (int y = 0; y < 8; ++y) {
    for (int x = 0; x < 16; ++x) {
      a.at<cv::Vec3b>(y, x) = x < 8 ? cv::Vec3b(200, 30, 30) : cv::Vec3b(20, 40, 220);
    }
  }
  cv::Mat b(12, 8, CV_8UC3);
  for (int y = 0; y < 12; ++y) {
    const uint8_t v = static_cast<uint8_t>(20 + 15 * y);
    for (int x = 0; x < 8; ++x) b.at<cv::Vec3b>(y, x) = cv::Vec3b(v, v, v);
  }
  return {a, b};
}

Status WriteGolden(const std::string& out) {
  DatasetWriterOptions wo;
  wo.schema = {DType::kUint8, Layout::kHWC, 16, 16, 3};
  wo.jpeg_max_side = 16;
  KILN_ASSIGN_OR_RETURN(std::unique_ptr<DatasetWriter> writer, DatasetWriter::Create(out, wo));
  JpegRecordOptions j;
  j.quality = 90;
  j.max_side = 16;
  const std::vector<cv::Mat> images = GoldenImages();
  const char* keys[] = {"red/halves.png", "grey/ramp.png"};
  for (size_t i = 0; i < images.size(); ++i) {
    EncodedRecord r;
    KILN_RETURN_IF_ERROR(
        EncodeJpegRecord(images[i], j, static_cast<int64_t>(i), keys[i], keys[i], &r));
    KILN_RETURN_IF_ERROR(writer->Add(r));
  }
  Manifest m;
  m.tool = "kiln golden (tests/tools/jpeg_records_test.cc)";
  m.classes = {"red", "grey"};
  m.jpeg_quality = 90;
  return writer->Finish(m).status();
}

TEST(JpegGoldenTest, Regenerate) {
  if (std::getenv("KILN_REGENERATE_GOLDEN") == nullptr) {
    GTEST_SKIP() << "set KILN_REGENERATE_GOLDEN=1 to rewrite tests/data/golden-jpeg";
  }
  std::filesystem::remove_all(kGoldenJpeg);
  const Status s = WriteGolden(kGoldenJpeg);
  ASSERT_TRUE(s.ok()) << s.ToString();
}

TEST(JpegGoldenTest, WriterAndEncoderReproduceTheGoldenBytes) {
  TempDir tmp;
  const Status s = WriteGolden(tmp / "g");
  ASSERT_TRUE(s.ok()) << s.ToString();
  for (const char* name : {"shard-00000.kiln", "kiln.json"}) {
    EXPECT_EQ(testing::ReadFileBytes(tmp / "g/" + std::string(name)),
              testing::ReadFileBytes(kGoldenJpeg + "/" + name))
        << name << " differs from the golden file (libjpeg-turbo's encoder or kiln's layout)";
  }
}

TEST(JpegGoldenTest, BytesAreAsSpecified) {
  const std::vector<uint8_t> b = testing::ReadFileBytes(kGoldenJpeg + "/shard-00000.kiln");
  ASSERT_GE(b.size(), 128u);
  // Section 12: flags 1, schema 16x16x3 uint8 HWC, max side 16 at bytes 48..51.
  EXPECT_EQ(std::string(b.begin(), b.begin() + 8), "KILNSHRD");
  EXPECT_EQ(LoadLE16(b.data() + 8), 1u);
  EXPECT_EQ(LoadLE16(b.data() + 10), 0u);
  EXPECT_EQ(LoadLE32(b.data() + 12), 1u);
  EXPECT_EQ(b[24], 1);  // uint8
  EXPECT_EQ(b[25], 1);  // HWC
  EXPECT_EQ(LoadLE16(b.data() + 26), 3u);
  EXPECT_EQ(LoadLE32(b.data() + 28), 16u);
  EXPECT_EQ(LoadLE32(b.data() + 32), 16u);
  EXPECT_EQ(LoadLE32(b.data() + 48), 16u);
  EXPECT_EQ(LoadLE32(b.data() + 52), 0u);
  EXPECT_EQ(LoadLE64(b.data() + 56), Xxh3(b.data(), 56));
  // Records start with a JPEG's SOI and JFIF APP0 markers; entries say codec 2 and raw sizes
  // 16 * 8 * 3 and 8 * 12 * 3.
  EXPECT_EQ(b[64], 0xff);
  EXPECT_EQ(b[65], 0xd8);
  auto shard = ShardReader::Open(kGoldenJpeg + "/shard-00000.kiln");
  ASSERT_TRUE(shard.ok()) << shard.status().ToString();
  ASSERT_EQ((*shard)->record_count(), 2u);
  EXPECT_EQ((*shard)->entry(0).codec, Codec::kJpeg);
  EXPECT_EQ((*shard)->entry(0).raw_size, 16u * 8 * 3);
  EXPECT_EQ((*shard)->entry(1).raw_size, 8u * 12 * 3);
  EXPECT_EQ((*shard)->entry(1).label, 1);
  const std::string json = testing::ReadFileString(kGoldenJpeg + "/kiln.json");
  EXPECT_NE(json.find("\"kiln_manifest_version\": 3"), std::string::npos);
  EXPECT_NE(json.find("\"records\": {\n    \"codec\": \"jpeg\",\n    \"quality\": 90,\n    "
                      "\"max_side\": 16\n  }"),
            std::string::npos)
      << json;
  VerifyOptions vo;
  vo.deep = true;
  vo.image_decoder = std::make_shared<JpegSampleDecoder>(0);
  const VerifyReport report = VerifyDataset(kGoldenJpeg, vo);
  EXPECT_TRUE(report.ok()) << VerifyReportToText(report);
}

TEST(JpegGoldenTest, GoldenDecodesToItsImages) {
  auto shard = ShardReader::Open(kGoldenJpeg + "/shard-00000.kiln");
  ASSERT_TRUE(shard.ok());
  const std::vector<cv::Mat> images = GoldenImages();
  JpegSampleDecoder decoder(3, 16);
  for (uint64_t i = 0; i < 2; ++i) {
    const ShardIndexEntry e = (*shard)->entry(i);
    std::vector<uint8_t> pixels;
    Result<JpegInfo> info = decoder.DecodeFull((*shard)->stored(e), e.stored_size, &pixels);
    ASSERT_TRUE(info.ok()) << info.status().ToString();
    EXPECT_EQ(info->width, static_cast<uint32_t>(images[i].cols));
    EXPECT_EQ(info->height, static_cast<uint32_t>(images[i].rows));
    const Difference d = Compare(pixels.data(), images[i].data, pixels.size());
    // Flat areas survive quality 90 within a few levels; the red/blue edge is softened by 4:2:0.
    EXPECT_LT(d.mean, 6.0) << "record " << i;
  }
  // Through the loader: a center crop of the whole image to 4x4 gives the halves' colours in
  // the outer columns of record 0.
  LoaderOptions o;
  o.batch_size = 2;
  o.shuffle = ShuffleMode::kNone;
  o.num_threads = 1;
  o.augment.center_crop_height = 4;
  o.augment.center_crop_width = 8;
  o.augment.center_crop_ratio = 1.0;
  const Epoch e = ReadEpoch(kGoldenJpeg, o);
  ASSERT_EQ(e.indices.size(), 2u);
  const uint8_t* left = e.bytes.data() + (1 * 8 + 0) * 3;
  const uint8_t* right = e.bytes.data() + (1 * 8 + 7) * 3;
  EXPECT_NEAR(left[0], 200, 12);
  EXPECT_NEAR(left[2], 30, 12);
  EXPECT_NEAR(right[0], 20, 12);
  EXPECT_NEAR(right[2], 220, 12);
  EXPECT_EQ(e.labels, (std::vector<int64_t>{0, 1}));
}

}  // namespace
}  // namespace kiln
