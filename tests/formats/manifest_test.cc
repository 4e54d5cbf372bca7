// Tests for formats/manifest.h: JSON round trip, every parse error, atomic write and Read.
#include "formats/manifest.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tests/test_util.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;

Manifest Sample() {
  Manifest m;
  m.tool = "kiln 0.1.0";
  m.schema.dtype = DType::kFloat16;
  m.schema.layout = Layout::kCHW;
  m.schema.height = 32;
  m.schema.width = 48;
  m.schema.channels = 3;
  m.samples = 150;
  m.classes = {"cat", "dog", "caf\xC3\xA9"};
  m.compression = "zstd:7";
  m.record_alignment = 128;
  m.shuffle_seed = 0xFFFFFFFFFFFFFFFFull;
  m.preprocessing_json = R"({"resize":"shorter","size":32})";
  m.source_json = R"({"root":"/data/in","listed":151,"rejected":1})";
  m.files = {{"shard-00000.kiln", 100, 123456, 0x0123456789abcdefull, std::nullopt},
             {"shard-00001.kiln", 50, 6543, 0xfedcba9876543210ull, std::nullopt}};
  return m;
}

void ExpectSame(const Manifest& a, const Manifest& b) {
  EXPECT_EQ(a.format, b.format);
  EXPECT_EQ(a.tool, b.tool);
  EXPECT_EQ(a.schema, b.schema);
  EXPECT_EQ(a.samples, b.samples);
  EXPECT_EQ(a.classes, b.classes);
  EXPECT_EQ(a.compression, b.compression);
  EXPECT_EQ(a.record_alignment, b.record_alignment);
  EXPECT_EQ(a.shuffle_seed, b.shuffle_seed);
  EXPECT_EQ(nlohmann::json::parse(a.preprocessing_json),
            nlohmann::json::parse(b.preprocessing_json));
  EXPECT_EQ(nlohmann::json::parse(a.source_json), nlohmann::json::parse(b.source_json));
  ASSERT_EQ(a.files.size(), b.files.size());
  for (size_t i = 0; i < a.files.size(); ++i) {
    EXPECT_EQ(a.files[i].file, b.files[i].file);
    EXPECT_EQ(a.files[i].samples, b.files[i].samples);
    EXPECT_EQ(a.files[i].bytes, b.files[i].bytes);
    EXPECT_EQ(a.files[i].xxh3_64, b.files[i].xxh3_64);
  }
}

TEST(ManifestTest, HexDigest) {
  EXPECT_EQ(HexDigest(0), "0000000000000000");
  EXPECT_EQ(HexDigest(0x0123456789abcdefull), "0123456789abcdef");
  EXPECT_EQ(HexDigest(~uint64_t{0}), "ffffffffffffffff");
}

TEST(ManifestTest, JsonRoundTrip) {
  const Manifest m = Sample();
  const std::string text = m.ToJson();
  Result<Manifest> back = Manifest::FromJson(text, "x/kiln.json");
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  ExpectSame(m, *back);
  EXPECT_EQ(back->ToJson(), text);  // stable
  // Without a shuffle seed it is null and comes back absent.
  Manifest no_seed = Sample();
  no_seed.shuffle_seed.reset();
  Result<Manifest> back2 = Manifest::FromJson(no_seed.ToJson(), "x");
  ASSERT_TRUE(back2.ok());
  EXPECT_FALSE(back2->shuffle_seed.has_value());
}

TEST(ManifestTest, JsonFieldsAndOrder) {
  const nlohmann::ordered_json j = nlohmann::ordered_json::parse(Sample().ToJson());
  std::vector<std::string> keys;
  for (const auto& item : j.items()) keys.push_back(item.key());
  const std::vector<std::string> expected = {"kiln_manifest_version",
                                             "format",
                                             "tool",
                                             "schema",
                                             "samples",
                                             "classes",
                                             "compression",
                                             "record_alignment",
                                             "shuffle_seed",
                                             "preprocessing",
                                             "source",
                                             "files",
                                             "manifest_xxh3_64"};
  EXPECT_EQ(keys, expected);
  EXPECT_EQ(j["kiln_manifest_version"], 2);
  EXPECT_EQ(j["schema"]["dtype"], "float16");
  EXPECT_EQ(j["schema"]["layout"], "chw");
  EXPECT_EQ(j["schema"]["sample_bytes"], 32 * 48 * 3 * 2);
  EXPECT_EQ(j["files"][0]["xxh3_64"], "0123456789abcdef");
  EXPECT_EQ(j["files"][1]["bytes"], 6543);
}

// Re-seals an edited manifest the way the writer does: a new manifest_xxh3_64.
std::string Sealed(nlohmann::ordered_json j) {
  j[kManifestChecksumKey] = HexDigest(*ManifestChecksum(j.dump(), "test"));
  return j.dump(2);
}

TEST(ManifestTest, OptionalFieldsTakeDefaults) {
  nlohmann::ordered_json j = nlohmann::ordered_json::parse(Sample().ToJson());
  for (const char* key :
       {"tool", "compression", "record_alignment", "shuffle_seed", "preprocessing", "source"}) {
    j.erase(key);
  }
  Result<Manifest> m = Manifest::FromJson(Sealed(j), "x");
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ(m->tool, "");
  EXPECT_EQ(m->compression, "none");
  EXPECT_EQ(m->record_alignment, 64u);
  EXPECT_FALSE(m->shuffle_seed.has_value());
  EXPECT_EQ(m->preprocessing_json, "{}");
  EXPECT_EQ(m->source_json, "{}");
}

TEST(ManifestTest, MissingRequiredFieldIsCorruptionNamingOrigin) {
  for (const char* key :
       {"kiln_manifest_version", "format", "schema", "samples", "classes", "files"}) {
    nlohmann::ordered_json j = nlohmann::ordered_json::parse(Sample().ToJson());
    j.erase(key);
    Result<Manifest> m = Manifest::FromJson(j.dump(), "/d/kiln.json");
    ASSERT_FALSE(m.ok()) << key;
    EXPECT_EQ(m.status().code(), StatusCode::kCorruption) << key;
    EXPECT_EQ(m.status().message().rfind("/d/kiln.json: ", 0), 0u) << m.status().message();
  }
  for (const char* key : {"dtype", "layout", "height", "width", "channels"}) {
    nlohmann::ordered_json j = nlohmann::ordered_json::parse(Sample().ToJson());
    j["schema"].erase(key);
    EXPECT_EQ(Manifest::FromJson(j.dump(), "o").status().code(), StatusCode::kCorruption) << key;
  }
  for (const char* key : {"file", "samples", "bytes", "xxh3_64"}) {
    nlohmann::ordered_json j = nlohmann::ordered_json::parse(Sample().ToJson());
    j["files"][1].erase(key);
    EXPECT_EQ(Manifest::FromJson(j.dump(), "o").status().code(), StatusCode::kCorruption) << key;
  }
}

TEST(ManifestTest, BadJsonIsCorruption) {
  for (const char* text : {"", "{", "[]", "42", "null", "{\"a\":}", "not json"}) {
    Result<Manifest> m = Manifest::FromJson(text, "/d/kiln.json");
    ASSERT_FALSE(m.ok()) << text;
    EXPECT_EQ(m.status().code(), StatusCode::kCorruption) << text;
    EXPECT_NE(m.status().message().find("/d/kiln.json"), std::string::npos);
  }
}

TEST(ManifestTest, WrongTypesAndValuesAreCorruption) {
  auto edited = [](auto edit) {
    nlohmann::ordered_json j = nlohmann::ordered_json::parse(Sample().ToJson());
    edit(j);
    return Manifest::FromJson(j.dump(), "o").status();
  };
  EXPECT_EQ(edited([](auto& j) { j["samples"] = "many"; }).code(), StatusCode::kCorruption);
  EXPECT_EQ(edited([](auto& j) { j["classes"] = 3; }).code(), StatusCode::kCorruption);
  EXPECT_EQ(edited([](auto& j) { j["schema"]["channels"] = 2; }).code(), StatusCode::kCorruption);
  EXPECT_EQ(edited([](auto& j) { j["schema"]["height"] = 0; }).code(), StatusCode::kCorruption);
  EXPECT_EQ(edited([](auto& j) { j["files"] = "shard-00000.kiln"; }).code(),
            StatusCode::kCorruption);
  EXPECT_EQ(edited([](auto& j) { j["files"][0]["xxh3_64"] = "0123"; }).code(),
            StatusCode::kCorruption);
  EXPECT_EQ(edited([](auto& j) { j["files"][0]["xxh3_64"] = "0123456789abcdeg"; }).code(),
            StatusCode::kCorruption);
}

// manifest.h: FromJson's errors are "Corruption naming `origin` and the bad or missing field".
// An unknown dtype or layout name in a file on disk is such a bad field.
TEST(ManifestTest, UnknownDTypeOrLayoutIsCorruptionNamingOrigin) {
  for (const auto& [key, value] : {std::pair<const char*, const char*>{"dtype", "int8"},
                                   std::pair<const char*, const char*>{"layout", "nhwc"}}) {
    nlohmann::ordered_json j = nlohmann::ordered_json::parse(Sample().ToJson());
    j["schema"][key] = value;
    Result<Manifest> m = Manifest::FromJson(j.dump(), "/d/kiln.json");
    ASSERT_FALSE(m.ok()) << key;
    EXPECT_EQ(m.status().code(), StatusCode::kCorruption) << m.status().ToString();
    EXPECT_NE(m.status().message().find("/d/kiln.json"), std::string::npos) << m.status().message();
    EXPECT_NE(m.status().message().find(value), std::string::npos) << m.status().message();
  }
}

TEST(ManifestTest, NewerManifestVersionIsNotSupported) {
  for (int version : {0, 4}) {
    nlohmann::ordered_json j = nlohmann::ordered_json::parse(Sample().ToJson());
    j["kiln_manifest_version"] = version;
    Result<Manifest> m = Manifest::FromJson(Sealed(j), "o");
    EXPECT_EQ(m.status().code(), StatusCode::kNotSupported) << version;
    EXPECT_NE(m.status().message().find("manifest version " + std::to_string(version)),
              std::string::npos)
        << m.status().message();
  }
}

// JPEG records: version 3 with `records`, only for such datasets; a version-2 manifest (every
// other dataset) keeps its bytes and cannot carry `records`, and version 3 needs them.
TEST(ManifestTest, JpegRecordsAreVersion3) {
  Manifest m = Sample();
  const std::string v2 = m.ToJson();
  EXPECT_NE(v2.find("\"kiln_manifest_version\": 2"), std::string::npos);
  EXPECT_EQ(v2.find("records"), std::string::npos);
  m.schema = {DType::kUint8, Layout::kHWC, 256, 256, 3};
  m.jpeg_max_side = 256;
  m.jpeg_quality = 85;
  const std::string v3 = m.ToJson();
  EXPECT_NE(v3.find("\"kiln_manifest_version\": 3"), std::string::npos);
  Result<Manifest> back = Manifest::FromJson(v3, "o");
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->jpeg_max_side, 256u);
  EXPECT_EQ(back->jpeg_quality, 85);
  nlohmann::ordered_json j = nlohmann::ordered_json::parse(v3);
  j["kiln_manifest_version"] = 2;
  EXPECT_FALSE(Manifest::FromJson(Sealed(j), "o").ok());
  j = nlohmann::ordered_json::parse(v3);
  j.erase("records");
  EXPECT_FALSE(Manifest::FromJson(Sealed(j), "o").ok());
  j = nlohmann::ordered_json::parse(v3);
  j["records"]["max_side"] = 128;  // the schema must be max_side x max_side
  EXPECT_FALSE(Manifest::FromJson(Sealed(j), "o").ok());
  j = nlohmann::ordered_json::parse(v3);
  j["format"] = "lmdb";  // JPEG records are a shards feature
  EXPECT_FALSE(Manifest::FromJson(Sealed(j), "o").ok());
}

// Every change that still parses is caught by manifest_xxh3_64 (a flipped class name
// or tool went unnoticed in version 1). The error names the manifest and both hashes.
TEST(ManifestTest, ChecksumCatchesEveryEditThatStillParses) {
  const std::string text = Sample().ToJson();
  const auto edits = std::vector<std::function<void(nlohmann::ordered_json&)>>{
      [](auto& j) { j["classes"][0] = "cbt"; },
      [](auto& j) { j["tool"] = "kiln 0.1.1"; },
      [](auto& j) { j["samples"] = j["samples"].template get<uint64_t>() + 1; },
      [](auto& j) { j["files"][1]["xxh3_64"] = "0123456789abcdee"; },
      [](auto& j) { j["files"][0]["bytes"] = 1; },
      [](auto& j) { j["compression"] = "zstd:4"; },
      [](auto& j) {
        j["preprocessing"] = {{"resize", 33}};
      },
      [](auto& j) { j["source"]["root"] = "/elsewhere"; },
      [](auto& j) { j["unknown_key"] = 1; },
      [](auto& j) { j["kiln_manifest_version"] = 1; },  // still has the checksum: checked
  };
  for (size_t i = 0; i < edits.size(); ++i) {
    nlohmann::ordered_json j = nlohmann::ordered_json::parse(text);
    edits[i](j);
    Result<Manifest> m = Manifest::FromJson(j.dump(2), "/d/kiln.json");
    ASSERT_FALSE(m.ok()) << "edit " << i;
    EXPECT_EQ(m.status().code(), StatusCode::kCorruption) << "edit " << i;
    EXPECT_EQ(m.status().message().rfind("/d/kiln.json: manifest checksum mismatch (stored ", 0),
              0u)
        << m.status().message();
  }
  // Whitespace and key order are not content: the same document still reads.
  nlohmann::ordered_json j = nlohmann::ordered_json::parse(text);
  nlohmann::ordered_json reordered;
  const std::vector<std::string> keys = {"files",  "manifest_xxh3_64",      "schema",
                                         "format", "kiln_manifest_version", "samples",
                                         "classes"};
  for (const std::string& k : keys) reordered[k] = j[k];
  for (auto& item : j.items()) reordered[item.key()] = item.value();
  EXPECT_TRUE(Manifest::FromJson(reordered.dump(), "o").ok());
  EXPECT_TRUE(Manifest::FromJson(j.dump(), "o").ok());
  // Version 2 requires the checksum; removing it is Corruption naming the key.
  j.erase(kManifestChecksumKey);
  Result<Manifest> m = Manifest::FromJson(j.dump(), "o");
  EXPECT_EQ(m.status().code(), StatusCode::kCorruption);
  EXPECT_NE(m.status().message().find(kManifestChecksumKey), std::string::npos);
}

// Manifests written before the checksum existed (version 1, no manifest_xxh3_64) still read:
// this is the manifest of tests/data/golden/raw/ as kiln wrote it until version 2.
TEST(ManifestTest, VersionOneWithoutChecksumStillReads) {
  const std::string v1 = R"({
  "kiln_manifest_version": 1, "format": "shards", "tool": "kiln golden",
  "schema": {"dtype": "uint8", "layout": "hwc", "height": 2, "width": 3, "channels": 1,
             "sample_bytes": 6},
  "samples": 3, "classes": ["cat", "dog", "bird"], "compression": "none",
  "record_alignment": 64, "shuffle_seed": null, "preprocessing": {}, "source": {},
  "files": [{"file": "shard-00000.kiln", "samples": 3, "bytes": 416,
             "xxh3_64": "c28ca2daa5fbf228"}]
})";
  Result<Manifest> m = Manifest::FromJson(v1, "old/kiln.json");
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ(m->classes, (std::vector<std::string>{"cat", "dog", "bird"}));
  EXPECT_EQ(m->files.at(0).xxh3_64, 0xc28ca2daa5fbf228ull);
  // Rewritten, it becomes version 2 with a checksum.
  EXPECT_NE(m->ToJson().find("\"kiln_manifest_version\": 2"), std::string::npos);
  EXPECT_TRUE(Manifest::FromJson(m->ToJson(), "o").ok());
}

TEST(ManifestTest, FileNamesMustStayInsideTheDirectory) {
  for (const char* name :
       {"../escape.kiln", "sub/shard.kiln", "/abs/shard.kiln", "", ".hidden", "..", "a/"}) {
    nlohmann::ordered_json j = nlohmann::ordered_json::parse(Sample().ToJson());
    j["files"][0]["file"] = name;
    Result<Manifest> m = Manifest::FromJson(j.dump(), "/d/kiln.json");
    ASSERT_FALSE(m.ok()) << name;
    EXPECT_EQ(m.status().code(), StatusCode::kCorruption) << name;
    EXPECT_NE(m.status().message().find("file name"), std::string::npos) << m.status().message();
  }
}

// The lists beside the data files that `source` names (kiln pack's rejected.tsv, skipped.tsv),
// in that order; names that would leave the directory or name the manifest or a data file, and
// keys that are not strings, are left out.
TEST(ManifestTest, SourceListFilesAreTheListsThatSourceNames) {
  Manifest m = Sample();
  EXPECT_TRUE(SourceListFiles(m).empty());
  m.source_json = R"({"skipped_list": "skipped.tsv", "rejected_list": "rejected.tsv"})";
  EXPECT_EQ(SourceListFiles(m), (std::vector<std::string>{"rejected.tsv", "skipped.tsv"}));
  m.source_json = R"({"rejected_list": "rejected.tsv", "rejected": 3})";
  EXPECT_EQ(SourceListFiles(m), std::vector<std::string>{"rejected.tsv"});
  const std::string data_file = m.files.at(0).file;
  for (const std::string& bad :
       std::vector<std::string>{"../rejected.tsv", "sub/rejected.tsv", "/etc/passwd", "", ".x",
                                "..", "kiln.json", data_file}) {
    m.source_json = nlohmann::json{{"rejected_list", bad}, {"skipped_list", "skipped.tsv"}}.dump();
    EXPECT_EQ(SourceListFiles(m), std::vector<std::string>{"skipped.tsv"}) << bad;
  }
  m.source_json = R"({"rejected_list": 7, "skipped_list": ["skipped.tsv"]})";
  EXPECT_TRUE(SourceListFiles(m).empty());
  m.source_json = "not json";
  EXPECT_TRUE(SourceListFiles(m).empty());
}

TEST(ManifestTest, WriteThenRead) {
  TempDir dir;
  const Manifest m = Sample();
  ASSERT_TRUE(m.Write(dir.path()).ok());
  EXPECT_TRUE(fs::exists(dir.path() + "/kiln.json"));
  EXPECT_FALSE(fs::exists(dir.path() + "/kiln.json.tmp"));
  Result<Manifest> back = Manifest::Read(dir.path());
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  ExpectSame(m, *back);
  // A second write replaces the first.
  Manifest m2 = Sample();
  m2.samples = 7;
  ASSERT_TRUE(m2.Write(dir.path()).ok());
  EXPECT_EQ(Manifest::Read(dir.path())->samples, 7u);
}

TEST(ManifestTest, ReadWithoutManifestIsNotFound) {
  TempDir dir;
  Result<Manifest> m = Manifest::Read(dir.path());
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), StatusCode::kNotFound);
  EXPECT_NE(m.status().message().find(dir.path()), std::string::npos);
  EXPECT_NE(m.status().message().find("kiln.json"), std::string::npos);
  EXPECT_EQ(Manifest::Read(dir.path() + "/no/such/dir").status().code(), StatusCode::kNotFound);
}

TEST(ManifestTest, ReadOfBadFileIsCorruptionNamingThePath) {
  TempDir dir;
  std::ofstream(dir.path() + "/kiln.json") << "{\"kiln_manifest_version\": 1";
  Result<Manifest> m = Manifest::Read(dir.path());
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), StatusCode::kCorruption);
  EXPECT_NE(m.status().message().find(dir.path() + "/kiln.json"), std::string::npos);
}

TEST(ManifestTest, WriteFileAtomicallyAndReadFileToString) {
  TempDir dir;
  const std::string path = dir.path() + "/side.txt";
  const std::string contents("a\0b\xff", 4);
  ASSERT_TRUE(WriteFileAtomically(path, contents).ok());
  EXPECT_FALSE(fs::exists(path + ".tmp"));
  Result<std::string> read = ReadFileToString(path);
  ASSERT_TRUE(read.ok());
  EXPECT_EQ(*read, contents);
  EXPECT_EQ(ReadFileToString(dir.path() + "/none").status().code(), StatusCode::kNotFound);
  Status s = WriteFileAtomically(dir.path() + "/missing/x", "y");
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find(dir.path() + "/missing/x"), std::string::npos);
}

// No exception crosses a library boundary. preprocessing_json and source_json are
// caller-filled text; Write must report bad JSON as a Status, not throw nlohmann::parse_error.
TEST(ManifestTest, WriteWithInvalidPreprocessingJsonDoesNotThrow) {
  TempDir dir;
  Manifest m = Sample();
  m.preprocessing_json = "{not json";
  Status s;
  EXPECT_NO_THROW(s = m.Write(dir.path()));
  EXPECT_FALSE(s.ok());
  EXPECT_FALSE(fs::exists(dir.path() + "/kiln.json"));
}

}  // namespace
}  // namespace kiln
