// PackPlan (tools/pack/pack_plan.h): the plan file's text, read back field for field; every damage
// a reader must refuse (truncation, a flipped byte, another file, a newer version, a plan
// edited and re-checksummed); OptionDifferences; PlanPack's plan against the partition record
// of a part packed without a plan; and the golden plan (tests/data/plan/).
#include "tools/pack/pack_plan.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "formats/file_util.h"
#include "formats/manifest.h"
#include "formats/xxh3.h"
#include "tests/test_util.h"
#include "tools/cli/cli_parsing.h"
#include "tools/pack/packer.h"

namespace kiln {
namespace {

using Json = nlohmann::ordered_json;

// The canonical form of plan_format.md, "Checksum", as nlohmann::json (sorted keys) dumps it.
std::string Canonical(const Json& j) { return nlohmann::json::parse(j.dump()).dump(); }

PackPlan SmallPlan() {
  PackPlan plan;
  plan.input = "data/list.txt";
  plan.kind = "list";
  plan.root = "data";
  plan.parts = 3;
  plan.classes = {"0", "1", "2"};
  plan.class_map = "classes.txt";
  plan.options_json = R"({"--format":"shards","--size":"28x28","--shuffle-seed":null})";
  plan.items = {{"a.png", 0, 120, 1}, {"b c/d.png", 2, std::nullopt, 2}, {"/abs/e.png", 1, 0, 4}};
  plan.problems = {{"data/list.txt", 3, "line 3: missing label"}, {"/x/\xff.png", 0, "bad"}};
  plan.skipped = {{"data/\xfe", "hidden"}};
  plan.warnings = {"a warning"};
  plan.listing_xxh3_64 = ListingHash(plan.items, plan.problems);
  plan.options_xxh3_64 = OptionsHash(plan.options_json, plan.classes);
  return plan;
}

std::string TextOf(const PackPlan& plan) {
  Result<std::string> text = PackPlanText(plan);
  EXPECT_TRUE(text.ok()) << text.status().ToString();
  return text.ok() ? *text : "";
}

// Edits the plan's JSON with `edit`, then writes a correct checksum again (a deliberate edit).
template <typename Edit>
std::string Edited(const std::string& text, Edit edit) {
  Json j = Json::parse(text);
  edit(j);
  j.erase(kPlanChecksumKey);
  const std::string canonical = Canonical(j);
  j[kPlanChecksumKey] = HexDigest(Xxh3(canonical.data(), canonical.size()));
  return j.dump();
}

std::string ErrorOf(const std::string& text) {
  Result<PackPlan> plan = ParsePackPlan(text, "P.json");
  EXPECT_FALSE(plan.ok());
  return plan.ok() ? "" : plan.status().message();
}

TEST(PackPlanTest, TextReadsBackFieldForField) {
  const PackPlan plan = SmallPlan();
  Result<PackPlan> back = ParsePackPlan(TextOf(plan), "P.json");
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->input, plan.input);
  EXPECT_EQ(back->kind, plan.kind);
  EXPECT_EQ(back->root, plan.root);
  EXPECT_EQ(back->parts, plan.parts);
  EXPECT_EQ(back->classes, plan.classes);
  EXPECT_EQ(back->class_map, plan.class_map);
  EXPECT_EQ(back->options_json, plan.options_json);
  ASSERT_EQ(back->items.size(), 3u);
  EXPECT_EQ(back->items[1].key, "b c/d.png");
  EXPECT_EQ(back->items[1].label, 2);
  EXPECT_FALSE(back->items[1].bytes.has_value());
  EXPECT_EQ(back->items[2].bytes, std::optional<uint64_t>(0));
  EXPECT_EQ(back->items[0].line, 1u);
  ASSERT_EQ(back->problems.size(), 2u);
  EXPECT_EQ(back->problems[1].path, "/x/\xff.png");  // bytes that are not UTF-8, kept
  EXPECT_EQ(back->problems[0].reason, "line 3: missing label");
  ASSERT_EQ(back->skipped.size(), 1u);
  EXPECT_EQ(back->skipped[0].path, "data/\xfe");
  EXPECT_EQ(back->warnings, plan.warnings);
  EXPECT_EQ(back->listing_xxh3_64, plan.listing_xxh3_64);
  EXPECT_EQ(back->options_xxh3_64, plan.options_xxh3_64);
  EXPECT_EQ(back->ItemPath(0), "data/a.png");
  EXPECT_EQ(back->ItemPath(2), "/abs/e.png");
}

TEST(PackPlanTest, LayoutIsOneMemberAndOneItemALine) {
  const std::string text = TextOf(SmallPlan());
  EXPECT_EQ(
      text.rfind("{\"format\":\"kiln-plan\",\n\"version\":1,\n\"input\":\"data/list.txt\",\n", 0),
      0u)
      << text;
  EXPECT_NE(text.find("\n\"items\":[\n[\"a.png\",0,120,1],\n[\"b c/d.png\",2,null,2],\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("{\"path\":{\"bytes_hex\":\"2f782fff2e706e67\"}"), std::string::npos);
  EXPECT_NE(text.find("\"ranges\":[[0,1],[1,2],[2,3]],\n"), std::string::npos);
  // The checksum is the last member, and the manifest's canonical form's hash.
  Json j = Json::parse(text);
  const std::string stored = j.at(kPlanChecksumKey);
  j.erase(kPlanChecksumKey);
  const std::string canonical = Canonical(j);
  EXPECT_EQ(stored, HexDigest(Xxh3(canonical.data(), canonical.size())));
  EXPECT_EQ(text.compare(text.size() - 35, 35, "\"plan_xxh3_64\":\"" + stored + "\"}\n"), 0);
}

TEST(PackPlanTest, TruncatedPlanNamesTheFileAndTheByte) {
  const std::string text = TextOf(SmallPlan());
  for (size_t cut : {size_t{0}, size_t{1}, text.size() / 3, text.size() / 2, text.size() - 3}) {
    const std::string error = ErrorOf(text.substr(0, cut));
    EXPECT_NE(error.find("P.json is not JSON (truncated or damaged?)"), std::string::npos) << error;
    EXPECT_NE(error.find("(byte "), std::string::npos) << error;
  }
}

TEST(PackPlanTest, FlippedByteIsAChecksumMismatch) {
  std::string text = TextOf(SmallPlan());
  const size_t at = text.find("120");
  ASSERT_NE(at, std::string::npos);
  text[at] = '7';  // the size of item 0: still valid JSON
  EXPECT_NE(ErrorOf(text).find("P.json: plan checksum mismatch (stored "), std::string::npos);
}

TEST(PackPlanTest, ForeignFilesAreNotPlans) {
  EXPECT_NE(ErrorOf(R"({"version":2,"classes":[]})").find("P.json is not a kiln plan"),
            std::string::npos);
  EXPECT_NE(ErrorOf("[1,2,3]").find("P.json is not a kiln plan"), std::string::npos);
  EXPECT_NE(ErrorOf(R"({"format":"kiln-plan","version":1})").find("without 'plan_xxh3_64'"),
            std::string::npos);
}

TEST(PackPlanTest, NewerVersionIsNotSupported) {
  const std::string text = Edited(TextOf(SmallPlan()), [](Json& j) { j["version"] = 2; });
  Result<PackPlan> plan = ParsePackPlan(text, "P.json");
  ASSERT_FALSE(plan.ok());
  EXPECT_EQ(plan.status().code(), StatusCode::kNotSupported);
  EXPECT_NE(plan.status().message().find("plan version 2 is newer"), std::string::npos);
}

TEST(PackPlanTest, EditedAndRechecksummedPlansAreRefused) {
  const std::string text = TextOf(SmallPlan());
  EXPECT_NE(ErrorOf(Edited(text,
                           [](Json& j) {
                             j["ranges"][1] = {1, 3};
                           }))
                .find("range of part 1 is [1,3], not [1, 2]"),
            std::string::npos);
  EXPECT_NE(ErrorOf(Edited(text, [](Json& j) { j["items"][0][1] = 1; }))
                .find("'listing_xxh3_64' does not match"),
            std::string::npos);
  EXPECT_NE(ErrorOf(Edited(text, [](Json& j) { j["options"]["--size"] = "32x32"; }))
                .find("'options_xxh3_64' does not match"),
            std::string::npos);
  EXPECT_NE(ErrorOf(Edited(text, [](Json& j) { j.erase("parts"); })).find("'parts' is missing"),
            std::string::npos);
  EXPECT_NE(ErrorOf(Edited(text,
                           [](Json& j) {
                             j["items"][2] = {"x", 1};
                           }))
                .find("item 2 must be [key, label, bytes or null, line]"),
            std::string::npos);
  EXPECT_NE(ErrorOf(Edited(text, [](Json& j) { j["kind"] = "tar"; })).find("'kind' must be"),
            std::string::npos);
  EXPECT_NE(ErrorOf(Edited(text, [](Json& j) { j["problems"][0]["line"] = "3"; }))
                .find("'problems[0].line' has the wrong type"),
            std::string::npos);
}

TEST(PackPlanTest, WriteIsAtomicAndReadNamesAMissingFile) {
  TempDir dir;
  const std::string path = dir / "plan.json";
  ASSERT_TRUE(WritePackPlan(path, SmallPlan()).ok());
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
  Result<PackPlan> back = ReadPackPlan(path);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->items.size(), 3u);
  Result<PackPlan> missing = ReadPackPlan(dir / "none.json");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("none.json"), std::string::npos);
}

TEST(OptionDifferencesTest, NamesEachFlagWithBothValues) {
  const auto d = OptionDifferences(R"({"--size":"28x28","--compress":"none","--dtype":"uint8"})",
                                   R"({"--size":"32x32","--compress":"none","--crop":"none"})");
  ASSERT_EQ(d.size(), 2u);
  EXPECT_EQ(d[0].flag, "--size");
  EXPECT_EQ(d[0].then, "\"28x28\"");
  EXPECT_EQ(d[0].now, "\"32x32\"");
  EXPECT_EQ(d[1].flag, "--crop");
  EXPECT_EQ(d[1].then, "not recorded");
  EXPECT_TRUE(OptionDifferences("{}", "not json").empty());
}

const std::string kSource = KILN_SOURCE_DIR;

// The options of `kiln pack --size 28 --channels 1 --shard-size 64KiB`, parsed as the CLI does.
PackOptions SmallPackOptions(const std::string& input) {
  PackOptions o;
  o.input = input;
  o.threads = 2;
  EXPECT_TRUE(
      ParsePackFlags("28", 0, "center", 1, "hwc", "uint8", "", "", "64KiB", "none", &o).ok());
  return o;
}

TEST(PlanPackTest, PlanHoldsThePartitionRecordOfAPartPackedWithoutIt) {
  TempDir dir;
  PackOptions o = SmallPackOptions(kSource + "/samples/fashion-mnist");
  o.shuffle_seed = 5;
  Result<PackPlan> plan = PlanPack(o, 4);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  EXPECT_EQ(plan->kind, "imagefolder");
  EXPECT_EQ(plan->items.size(), 1000u);
  EXPECT_EQ(plan->classes.size(), 10u);
  for (const PlanItem& item : plan->items) EXPECT_TRUE(item.bytes.has_value()) << item.key;
  o.output = dir / "out";
  o.part_index = 1;
  o.part_count = 4;
  Result<PackReport> part = Pack(o);
  ASSERT_TRUE(part.ok()) << part.status().ToString();
  const PartitionRecord& r = *part->partition;
  EXPECT_EQ(r.listing_xxh3_64, plan->listing_xxh3_64);
  EXPECT_EQ(r.options_xxh3_64, plan->options_xxh3_64);
  EXPECT_EQ(r.options_json, plan->options_json);
  EXPECT_EQ(r.items, plan->Range(1));
  // The same part from the plan: the same manifest (the partition record included).
  o.output = dir / "from-plan";
  o.plan = std::make_shared<const PackPlan>(*plan);
  o.plan_path = "plan.json";
  Result<PackReport> planned = Pack(o);
  ASSERT_TRUE(planned.ok()) << planned.status().ToString();
  EXPECT_EQ(planned->manifest.ToJson(), part->manifest.ToJson());
}

TEST(PlanPackTest, PackRefusesOptionsOtherThanThePlans) {
  TempDir dir;
  PackOptions o = SmallPackOptions(kSource + "/samples/fashion-mnist");
  Result<PackPlan> plan = PlanPack(o, 2);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  o.plan = std::make_shared<const PackPlan>(*plan);
  o.plan_path = "p.json";
  o.output = dir / "out";
  o.part_count = 2;
  o.part_index = 0;
  o.compression.codec = Codec::kZstd;
  Result<PackReport> r = Pack(o);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("--compress is \"zstd:3\" here but \"none\" in the plan"),
            std::string::npos)
      << r.status().message();
  o.compression = Compression();
  o.part_count = 3;
  r = Pack(o);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("--of 3, but the plan cuts the input into 2 parts"),
            std::string::npos)
      << r.status().message();
}

TEST(PlanPackTest, TarAndTFRecordInputHaveNoPlan) {
  Result<PackPlan> plan = PlanPack(SmallPackOptions("shards/{000000..000003}.tar"), 2);
  ASSERT_FALSE(plan.ok());
  EXPECT_NE(plan.status().message().find("split by file"), std::string::npos);
}

// Runs `body` with the working directory at the source tree's root (the golden plan's paths
// are relative to it).
template <typename Body>
void InSourceTree(Body body) {
  const std::filesystem::path before = std::filesystem::current_path();
  std::filesystem::current_path(kSource);
  body();
  std::filesystem::current_path(before);
}

TEST(PackPlanGolden, PlanOfTheFixedInputIsByteIdentical) {
  InSourceTree([] {
    PackOptions o = SmallPackOptions("tests/data/plan/list.txt");
    o.root = "samples/fashion-mnist";
    o.shuffle_seed = 7;
    Result<PackPlan> plan = PlanPack(o, 3);
    ASSERT_TRUE(plan.ok()) << plan.status().ToString();
    const std::string golden = "tests/data/plan/golden.plan.json";
    const std::string text = TextOf(*plan);
    if (std::getenv("KILN_REGENERATE_GOLDEN") != nullptr) {
      ASSERT_TRUE(WriteFileAtomically(golden, text).ok());
    }
    EXPECT_EQ(text, testing::ReadFileString(golden))
        << "the plan format drifted (tests/data/plan/README.md)";
    Result<PackPlan> back = ReadPackPlan(golden);
    ASSERT_TRUE(back.ok()) << back.status().ToString();
    EXPECT_EQ(back->items.size(), 7u);
    EXPECT_EQ(back->problems.size(), 1u);
  });
}

}  // namespace
}  // namespace kiln
