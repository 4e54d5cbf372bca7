// The pack option table (tools/pack/pack_option_table.h) against every other list of pack
// options: the JSON objects built from it, the resume fingerprint, and `kiln pack`'s flags and
// their defaults. python/tests/test_options.py checks the Python side.
#include "tools/pack/pack_option_table.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <CLI/CLI.hpp>
#include <functional>
#include <map>
#include <set>
#include <string>

#include "tools/cli/cli_pack_flags.h"
#include "tools/pack/pack_journal.h"

namespace kiln {
namespace {

// The key of a row in PackOptionValuesJson.
std::string Key(const PackOptionInfo& row) { return *row.name != '\0' ? row.name : row.part_key; }

// For every row, a value other than kiln pack's default. A new row without one here fails
// EveryRowHasAMutation; then Mutations* below say which lists it is missing from.
const std::map<std::string, std::function<void(PackOptions*)>>& Mutations() {
  static const std::map<std::string, std::function<void(PackOptions*)>> m = {
      {"format", [](PackOptions* o) { o->format = "lmdb"; }},
      {"size", [](PackOptions* o) { o->preprocess.schema.height = 32; }},
      {"resize", [](PackOptions* o) { o->preprocess.resize_shorter = 256; }},
      {"crop", [](PackOptions* o) { o->preprocess.crop = CropMode::kNone; }},
      {"channels", [](PackOptions* o) { o->preprocess.schema.channels = 1; }},
      {"layout", [](PackOptions* o) { o->preprocess.schema.layout = Layout::kCHW; }},
      {"dtype", [](PackOptions* o) { o->preprocess.schema.dtype = DType::kFloat32; }},
      {"mean", [](PackOptions* o) { o->preprocess.mean[2] = 0.5f; }},
      {"std", [](PackOptions* o) { o->preprocess.std[1] = 0.5f; }},
      {"compress", [](PackOptions* o) { o->compression.codec = Codec::kZstd; }},
      {"shard_size", [](PackOptions* o) { o->shard_size_bytes = 1 << 20; }},
      {"shuffle_seed", [](PackOptions* o) { o->shuffle_seed = 7; }},
      {"max_pixels", [](PackOptions* o) { o->decode.max_pixels = 1000; }},
      {"on_error", [](PackOptions* o) { o->on_error = OnError::kFail; }},
      {"exact_decode", [](PackOptions* o) { o->exact_decode = true; }},
      {"image_ext", [](PackOptions* o) { o->tar.image_exts = {"png"}; }},
      {"label_from", [](PackOptions* o) { o->tar.label_from = "json:label"; }},
      {"feature_image", [](PackOptions* o) { o->tfrecord.feature_image = "img"; }},
      {"feature_label", [](PackOptions* o) { o->tfrecord.feature_label = "lbl"; }},
      {"feature_key", [](PackOptions* o) { o->tfrecord.feature_key = "image/filename"; }},
      {"alpha background", [](PackOptions* o) { o->decode.background = 0; }},
      {"resized max pixels", [](PackOptions* o) { o->preprocess.max_pixels = 1000; }},
      // JPEG records: both rows appear (and change every list) when either is set.
      {"codec", [](PackOptions* o) { o->jpeg.max_side = 64; }},
      {"max_side", [](PackOptions* o) { o->jpeg.max_side = 128; }},
      {"input", [](PackOptions* o) { o->input = "elsewhere"; }},
      {"output", [](PackOptions* o) { o->output = "elsewhere"; }},
      {"root", [](PackOptions* o) { o->root = "elsewhere"; }},
      {"threads", [](PackOptions* o) { o->threads = 2; }},
      {"overwrite", [](PackOptions* o) { o->overwrite = true; }},
      {"resume", [](PackOptions* o) { o->resume = true; }},
  };
  return m;
}

TEST(PackOptionTableTest, EveryRowHasAMutationAndOneKey) {
  std::set<std::string> keys;
  for (const PackOptionInfo& row : PackOptionTable()) {
    EXPECT_TRUE(keys.insert(Key(row)).second) << "two rows are called " << Key(row);
    EXPECT_EQ(Mutations().count(Key(row)), 1u) << "no mutation for row " << Key(row);
  }
  EXPECT_EQ(keys.size(), Mutations().size()) << "a mutation names no row";
}

// Each row's value reads its own field, and the JSON objects and the fingerprint change with
// exactly the rows the table says they hold: a row whose field PackFingerprint forgets (or
// hashes without the table saying so) fails here.
TEST(PackOptionTableTest, EachListChangesWithExactlyItsRows) {
  const PackOptions base = DefaultPackOptions();
  const std::string values = PackOptionValuesJson(base);
  const std::string part = PartOptionsJson(base);
  const std::string manifest = PreprocessingJson(base);
  const uint64_t fingerprint = PackFingerprint(base, {}, {}, {});
  for (const PackOptionInfo& row : PackOptionTable()) {
    SCOPED_TRACE(Key(row));
    PackOptions o = base;
    Mutations().at(Key(row))(&o);
    EXPECT_NE(PackOptionValuesJson(o), values);
    EXPECT_EQ(PartOptionsJson(o) != part, *row.part_key != '\0');
    EXPECT_EQ(PreprocessingJson(o) != manifest, *row.manifest_key != '\0');
    EXPECT_EQ(PackFingerprint(o, {}, {}, {}) != fingerprint, row.fingerprinted);
  }
}

TEST(PackOptionTableTest, PartOptionsJsonKeysAreThePartKeysInTableOrder) {
  std::string expected;
  for (const PackOptionInfo& row : PackOptionTable()) {
    if (*row.part_key != '\0') expected += std::string(expected.empty() ? "" : " ") + row.part_key;
  }
  EXPECT_EQ(expected,
            "--format --size --resize --crop --channels --layout --dtype --mean --std --compress "
            "--shard-size --shuffle-seed --max-pixels --on-error --exact-decode --image-ext "
            "--label-from --feature-image --feature-label --feature-key alpha background "
            "resized max pixels --codec --max-side");
}

// The JPEG-record rows are left out of every JSON object while --codec is none, so that packs
// without JPEG records keep their bytes; with it they follow the others.
TEST(PackOptionTableTest, JpegRowsOnlyWhenOn) {
  PackOptions o = DefaultPackOptions();
  EXPECT_EQ(PartOptionsJson(o).find("--codec"), std::string::npos);
  EXPECT_EQ(PreprocessingJson(o).find("max_side"), std::string::npos);
  o.jpeg.quality = 85;
  o.jpeg.max_side = 256;
  const std::string part = PartOptionsJson(o);
  EXPECT_NE(part.find(R"("resized max pixels":178956970,"--codec":"jpeg:85","--max-side":256})"),
            std::string::npos)
      << part;
  const std::string pre = PreprocessingJson(o);
  EXPECT_NE(pre.find(R"("max_pixels":178956970,"codec":"jpeg:85","max_side":256})"),
            std::string::npos)
      << pre;
}

// The bytes the manifests and partition records of tests/data hold for kiln pack's defaults.
TEST(PackOptionTableTest, DefaultJsonBytes) {
  EXPECT_EQ(PreprocessingJson(DefaultPackOptions()),
            R"({"size":[224,224],"resize_shorter":0,"crop":"center",)"
            R"("interpolation":"area when shrinking, linear when enlarging","channels":3,)"
            R"("dtype":"uint8","layout":"hwc","mean":[0.0,0.0,0.0],"std":[1.0,1.0,1.0],)"
            R"("decode_policy":"tools/imaging/decode_policy.md","jpeg_decode":"shrink-on-load",)"
            R"("alpha_background":255,"max_pixels":178956970})");
  EXPECT_EQ(
      PartOptionsJson(DefaultPackOptions()),
      R"({"--format":"shards","--size":"224x224","--resize":0,"--crop":"center",)"
      R"("--channels":3,"--layout":"hwc","--dtype":"uint8","--mean":[0.0,0.0,0.0],)"
      R"("--std":[1.0,1.0,1.0],"--compress":"none","--shard-size":134217728,)"
      R"("--shuffle-seed":null,"--max-pixels":178956970,"--on-error":"skip",)"
      R"("--exact-decode":false,"--image-ext":["jpg","jpeg","png","apng","gif","bmp","tif","tiff",)"
      R"("webp","ppm","pgm","pbm","pnm"],"--label-from":"cls",)"
      R"("--feature-image":"image/encoded","--feature-label":"image/class/label",)"
      R"("--feature-key":"","alpha background":255,"resized max pixels":178956970})");
}

// `kiln pack` without flags packs DefaultPackOptions(): the flags' defaults (PackFlags) are the
// table's. Fails when either side's default changes alone.
TEST(PackOptionTableTest, FlagDefaultsAreTheTableDefaults) {
  PackFlags flags;
  flags.input = "in";
  flags.output = "out";
  Result<PackOptions> from_flags = PackOptionsFromFlags(flags);
  ASSERT_TRUE(from_flags.ok()) << from_flags.status().ToString();
  PackOptions expected = DefaultPackOptions();
  expected.input = "in";
  expected.output = "out";
  EXPECT_EQ(PackOptionValuesJson(*from_flags), PackOptionValuesJson(expected));
}

// Every flag DeclareRecordFlags declares is a row's flag (but the class map's, which the table
// leaves out), and every row with a part_key and a flag there is declared by it.
TEST(PackOptionTableTest, RecordFlagsAreRows) {
  CLI::App app;
  PackFlags flags;
  DeclareRecordFlags(&app, &flags);
  std::set<std::string> table_flags;
  for (const PackOptionInfo& row : PackOptionTable()) {
    if (*row.flag != '\0') table_flags.insert(row.flag);
  }
  for (const CLI::Option* option : app.get_options()) {
    const std::string flag = option->get_name();
    if (flag == "--help" || flag == "--classes" || flag == "--classes-from") continue;
    EXPECT_EQ(table_flags.count(flag), 1u) << flag << " is not in the pack option table";
  }
}

}  // namespace
}  // namespace kiln
