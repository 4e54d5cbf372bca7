// Tests for formats/dataset_writer.h: shard rollover, output-directory rules, overwrite,
// abandonment and the staging directory.
#include "formats/dataset_writer.h"

#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "formats/dataset.h"
#include "formats/format_registry.h"
#include "formats/shards/shard_reader.h"
#include "formats/shards/shard_set_writer.h"
#include "tests/test_util.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;

TensorSchema Schema(uint32_t h, uint32_t w, uint32_t c) {
  TensorSchema s;
  s.height = h;
  s.width = w;
  s.channels = c;
  return s;
}

DatasetWriterOptions Options(const TensorSchema& schema, uint64_t shard_size = 1 << 20) {
  DatasetWriterOptions o;
  o.schema = schema;
  o.shard_size_bytes = shard_size;
  return o;
}

EncodedRecord Record(const TensorSchema& schema, uint64_t i) {
  std::vector<uint8_t> raw(schema.sample_bytes());
  for (size_t j = 0; j < raw.size(); ++j) raw[j] = static_cast<uint8_t>(i * 31 + j);
  RecordEncoder enc(Compression{});
  EncodedRecord rec;
  EXPECT_TRUE(enc.Encode(raw.data(), raw.size(), static_cast<int64_t>(i % 4),
                         "img/" + std::to_string(i) + ".png", &rec)
                  .ok());
  return rec;
}

std::vector<std::string> Names(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

TEST(DatasetWriterTest, ShardFileName) {
  EXPECT_EQ(ShardFileName(0), "shard-00000.kiln");
  EXPECT_EQ(ShardFileName(42), "shard-00042.kiln");
  EXPECT_EQ(ShardFileName(123456), "shard-123456.kiln");
}

TEST(DatasetWriterTest, WritesACompleteDataset) {
  TempDir tmp;
  const std::string out = tmp / "ds";
  const TensorSchema schema = Schema(4, 4, 3);
  auto writer = DatasetWriter::Create(out, Options(schema));
  ASSERT_TRUE(writer.ok()) << writer.status().ToString();
  EXPECT_EQ((*writer)->staging_dir(), out + ".partial");
  EXPECT_TRUE(fs::is_directory(out + ".partial"));
  for (uint64_t i = 0; i < 20; ++i) ASSERT_TRUE((*writer)->Add(Record(schema, i)).ok());
  EXPECT_EQ((*writer)->samples(), 20u);
  EXPECT_FALSE(fs::exists(out));  // nothing under the final name before Finish
  ASSERT_TRUE((*writer)->AddFile("rejected.txt", "bad.png\n").ok());
  Manifest m;
  m.tool = "test";
  m.classes = {"a", "b", "c", "d"};
  auto written = (*writer)->Finish(m);
  ASSERT_TRUE(written.ok()) << written.status().ToString();
  EXPECT_FALSE(fs::exists(out + ".partial"));
  EXPECT_EQ(Names(out),
            (std::vector<std::string>{"kiln.json", "rejected.txt", "shard-00000.kiln"}));
  EXPECT_EQ(written->format, "shards");
  EXPECT_EQ(written->samples, 20u);
  EXPECT_EQ(written->schema, schema);
  EXPECT_EQ(written->record_alignment, 64u);
  EXPECT_EQ(written->tool, "test");
  ASSERT_EQ(written->files.size(), 1u);
  EXPECT_EQ(written->files[0].bytes, fs::file_size(out + "/shard-00000.kiln"));
  auto ds = Dataset::Open(out);
  ASSERT_TRUE(ds.ok()) << ds.status().ToString();
  EXPECT_EQ((*ds)->num_samples(), 20u);
  EXPECT_EQ((*ds)->manifest().classes, m.classes);
  RecordDecoder dec;
  std::vector<uint8_t> buf(schema.sample_bytes());
  for (uint64_t i = 0; i < 20; ++i) {
    int64_t label = -1;
    ASSERT_TRUE((*ds)->ReadSample(i, &dec, buf.data(), &label).ok());
    EXPECT_EQ(buf, Record(schema, i).stored);
    EXPECT_EQ(label, static_cast<int64_t>(i % 4));
    EXPECT_EQ(*(*ds)->Key(i), "img/" + std::to_string(i) + ".png");
  }
}

TEST(DatasetWriterTest, RollsOverAtShardSize) {
  TempDir tmp;
  const std::string out = tmp / "ds";
  const TensorSchema schema = Schema(10, 10, 1);  // 100-byte records: 128 bytes with padding
  constexpr uint64_t kShardSize = 2048;
  DatasetWriterOptions options = Options(schema, kShardSize);
  auto writer = DatasetWriter::Create(out, options);
  ASSERT_TRUE(writer.ok());
  constexpr uint64_t kSamples = 50;
  for (uint64_t i = 0; i < kSamples; ++i) ASSERT_TRUE((*writer)->Add(Record(schema, i)).ok());
  auto m = (*writer)->Finish(Manifest{});
  ASSERT_TRUE(m.ok());
  ASSERT_GE(m->files.size(), 4u);
  uint64_t total = 0;
  for (size_t s = 0; s < m->files.size(); ++s) {
    const DataFileInfo& f = m->files[s];
    EXPECT_EQ(f.file, ShardFileName(static_cast<uint32_t>(s)));
    EXPECT_LE(f.bytes, kShardSize) << f.file;
    EXPECT_EQ(f.bytes, fs::file_size(out + "/" + f.file));
    EXPECT_GT(f.samples, 0u);
    auto reader = ShardReader::Open(out + "/" + f.file);
    ASSERT_TRUE(reader.ok());
    EXPECT_EQ((*reader)->header().shard_index, s);
    EXPECT_EQ((*reader)->header().first_sample, total);
    EXPECT_EQ((*reader)->record_count(), f.samples);
    if (s + 1 < m->files.size()) {
      // The shard was closed because the next record would have pushed it past the limit
      // (formats/shards/shard_format.md sections 3-5: aligned payload, index entry, key, footer).
      const ShardReader& r = **reader;
      const ShardIndexEntry last = r.entry(r.record_count() - 1);
      const uint64_t next_offset = AlignUp(last.offset + last.stored_size, 64);
      const uint64_t next_key = ("img/" + std::to_string(total + f.samples) + ".png").size();
      const uint64_t projected =
          AlignUp(AlignUp(next_offset + 100, 8) + (r.record_count() + 1) * kShardIndexEntryBytes +
                      r.footer().keys_size + next_key,
                  8) +
          kShardFooterBytes;
      EXPECT_GT(projected, kShardSize) << f.file;
      EXPECT_LE(f.bytes, kShardSize);
    }
    total += f.samples;
  }
  EXPECT_EQ(total, kSamples);
  EXPECT_TRUE(Dataset::Open(out).ok());
}

TEST(DatasetWriterTest, RecordLargerThanShardSizeGetsItsOwnShard) {
  TempDir tmp;
  const std::string out = tmp / "ds";
  const TensorSchema schema = Schema(40, 40, 1);  // 1600 bytes > 1024
  auto writer = DatasetWriter::Create(out, Options(schema, 1024));
  ASSERT_TRUE(writer.ok());
  for (uint64_t i = 0; i < 3; ++i) ASSERT_TRUE((*writer)->Add(Record(schema, i)).ok());
  auto m = (*writer)->Finish(Manifest{});
  ASSERT_TRUE(m.ok());
  ASSERT_EQ(m->files.size(), 3u);
  for (const DataFileInfo& f : m->files) EXPECT_EQ(f.samples, 1u);
}

// dataset_writer.h: bytes_written() is "bytes in finished shards plus the open one". Once every
// shard is finished it must equal the sum of the shard file sizes.
TEST(DatasetWriterTest, BytesWrittenMatchesShardSizes) {
  TempDir tmp;
  const std::string out = tmp / "ds";
  const TensorSchema schema = Schema(10, 10, 1);
  auto writer = DatasetWriter::Create(out, Options(schema, 2048));
  ASSERT_TRUE(writer.ok());
  for (uint64_t i = 0; i < 30; ++i) ASSERT_TRUE((*writer)->Add(Record(schema, i)).ok());
  const uint64_t before_finish = (*writer)->bytes_written();
  auto m = (*writer)->Finish(Manifest{});
  ASSERT_TRUE(m.ok());
  uint64_t total = 0;
  for (const DataFileInfo& f : m->files) total += f.bytes;
  EXPECT_EQ(before_finish, total);
}

TEST(DatasetWriterTest, BadOptionsAreInvalidArgument) {
  TempDir tmp;
  DatasetWriterOptions o = Options(Schema(2, 2, 1));
  o.shard_size_bytes = 1023;
  EXPECT_EQ(DatasetWriter::Create(tmp / "a", o).status().code(), StatusCode::kInvalidArgument);
  o.shard_size_bytes = (uint64_t{1} << 40) + 1;
  EXPECT_EQ(DatasetWriter::Create(tmp / "a", o).status().code(), StatusCode::kInvalidArgument);
  o = Options(Schema(2, 2, 1));
  o.record_alignment = 48;
  EXPECT_EQ(DatasetWriter::Create(tmp / "a", o).status().code(), StatusCode::kInvalidArgument);
  o.record_alignment = 4;
  EXPECT_EQ(DatasetWriter::Create(tmp / "a", o).status().code(), StatusCode::kInvalidArgument);
  o = Options(Schema(2, 2, 2));
  EXPECT_EQ(DatasetWriter::Create(tmp / "a", o).status().code(), StatusCode::kInvalidArgument);
  EXPECT_FALSE(fs::exists(tmp / "a.partial"));
}

TEST(DatasetWriterTest, NonEmptyOutputIsInvalidArgument) {
  TempDir tmp;
  const std::string out = tmp / "ds";
  fs::create_directories(out);
  std::ofstream(out + "/precious.txt") << "keep me";
  auto writer = DatasetWriter::Create(out, Options(Schema(2, 2, 1)));
  ASSERT_FALSE(writer.ok());
  EXPECT_EQ(writer.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(writer.status().message().find(out), std::string::npos);
  EXPECT_NE(writer.status().message().find("overwrite"), std::string::npos);
  EXPECT_TRUE(fs::exists(out + "/precious.txt"));
  EXPECT_FALSE(fs::exists(out + ".partial"));
  // A regular file under the output name is refused too, even with overwrite.
  std::ofstream(tmp / "file") << "x";
  DatasetWriterOptions o = Options(Schema(2, 2, 1));
  o.overwrite = true;
  EXPECT_EQ(DatasetWriter::Create(tmp / "file", o).status().code(), StatusCode::kInvalidArgument);
}

TEST(DatasetWriterTest, EmptyExistingOutputIsReplaced) {
  TempDir tmp;
  const std::string out = tmp / "ds";
  fs::create_directories(out);
  const TensorSchema schema = Schema(2, 2, 1);
  auto writer = DatasetWriter::Create(out + "/", Options(schema));  // trailing slash
  ASSERT_TRUE(writer.ok()) << writer.status().ToString();
  EXPECT_EQ((*writer)->staging_dir(), out + ".partial");
  ASSERT_TRUE((*writer)->Add(Record(schema, 0)).ok());
  ASSERT_TRUE((*writer)->Finish(Manifest{}).ok());
  EXPECT_TRUE(fs::exists(out + "/kiln.json"));
  EXPECT_TRUE(Dataset::Open(out).ok());
}

TEST(DatasetWriterTest, OverwriteReplacesTheOldDataset) {
  TempDir tmp;
  const std::string out = tmp / "ds";
  const TensorSchema schema = Schema(2, 2, 1);
  {
    auto writer = DatasetWriter::Create(out, Options(schema));
    ASSERT_TRUE(writer.ok());
    for (uint64_t i = 0; i < 5; ++i) ASSERT_TRUE((*writer)->Add(Record(schema, i)).ok());
    ASSERT_TRUE((*writer)->Finish(Manifest{}).ok());
  }
  std::ofstream(out + "/stale.txt") << "from the old dataset";
  DatasetWriterOptions o = Options(schema);
  o.overwrite = true;
  auto writer = DatasetWriter::Create(out, o);
  ASSERT_TRUE(writer.ok()) << writer.status().ToString();
  for (uint64_t i = 0; i < 3; ++i) ASSERT_TRUE((*writer)->Add(Record(schema, i + 100)).ok());
  // Until Finish the old dataset stays whole.
  EXPECT_EQ((*Dataset::Open(out))->num_samples(), 5u);
  ASSERT_TRUE((*writer)->Finish(Manifest{}).ok());
  auto ds = Dataset::Open(out);
  ASSERT_TRUE(ds.ok());
  EXPECT_EQ((*ds)->num_samples(), 3u);
  EXPECT_FALSE(fs::exists(out + "/stale.txt"));
  EXPECT_EQ(Names(tmp.path()), (std::vector<std::string>{"ds"}));  // no .old-*, no .partial
}

TEST(DatasetWriterTest, AbandonedWriterLeavesNothing) {
  TempDir tmp;
  const std::string out = tmp / "ds";
  const TensorSchema schema = Schema(10, 10, 1);
  {
    auto writer = DatasetWriter::Create(out, Options(schema, 2048));
    ASSERT_TRUE(writer.ok());
    for (uint64_t i = 0; i < 40; ++i) ASSERT_TRUE((*writer)->Add(Record(schema, i)).ok());
    ASSERT_TRUE((*writer)->AddFile("rejected.txt", "x").ok());
    EXPECT_GT(Names(out + ".partial").size(), 2u);  // finished shards and the open .tmp
  }
  EXPECT_FALSE(fs::exists(out));
  EXPECT_FALSE(fs::exists(out + ".partial"));
  EXPECT_TRUE(fs::is_empty(tmp.path()));
}

TEST(DatasetWriterTest, AbandonedOverwriteKeepsTheOldDataset) {
  TempDir tmp;
  const std::string out = tmp / "ds";
  const TensorSchema schema = Schema(2, 2, 1);
  {
    auto writer = DatasetWriter::Create(out, Options(schema));
    ASSERT_TRUE(writer.ok());
    ASSERT_TRUE((*writer)->Add(Record(schema, 0)).ok());
    ASSERT_TRUE((*writer)->Finish(Manifest{}).ok());
  }
  {
    DatasetWriterOptions o = Options(schema);
    o.overwrite = true;
    auto writer = DatasetWriter::Create(out, o);
    ASSERT_TRUE(writer.ok());
    ASSERT_TRUE((*writer)->Add(Record(schema, 1)).ok());
  }
  EXPECT_TRUE(Dataset::Open(out).ok());
  EXPECT_FALSE(fs::exists(out + ".partial"));
}

TEST(DatasetWriterTest, ForeignPartialDirectoryIsNeverRemoved) {
  TempDir tmp;
  const std::string out = tmp / "ds";
  fs::create_directories(out + ".partial");
  std::ofstream(out + ".partial/thesis.txt") << "precious";
  auto writer = DatasetWriter::Create(out, Options(Schema(2, 2, 1)));
  ASSERT_FALSE(writer.ok());
  EXPECT_EQ(writer.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(writer.status().message().find("not made by kiln"), std::string::npos);
  EXPECT_TRUE(fs::exists(out + ".partial/thesis.txt"));
}

// A run killed between creating <out>.partial and renaming its marker into place leaves an empty
// directory, or one with only the marker's temporary file: the next run takes it over (the
// interrupted-pack test hit this window under load).
TEST(DatasetWriterTest, StagingKilledBeforeItsMarkerIsTakenOver) {
  TempDir tmp;
  for (bool with_tmp_marker : {false, true}) {
    const std::string out = tmp / (with_tmp_marker ? "b" : "a");
    fs::create_directories(out + ".partial");
    if (with_tmp_marker) std::ofstream(out + ".partial/" + kStagingMarkerFileName + ".tmp") << "k";
    auto writer = DatasetWriter::Create(out, Options(Schema(2, 2, 1)));
    ASSERT_TRUE(writer.ok()) << writer.status().message();
    ASSERT_TRUE((*writer)->Add(Record(Schema(2, 2, 1), 1)).ok());
    ASSERT_TRUE((*writer)->Finish(Manifest()).ok());
    EXPECT_TRUE(Dataset::Open(out).ok());
  }
}

TEST(DatasetWriterTest, OverwriteReplacesOnlyAKilnDataset) {
  TempDir tmp;
  const std::string out = tmp / "notds";
  fs::create_directories(out);
  std::ofstream(out + "/important.txt") << "keep me";
  DatasetWriterOptions options = Options(Schema(2, 2, 1));
  options.overwrite = true;
  auto writer = DatasetWriter::Create(out, options);
  ASSERT_FALSE(writer.ok());
  EXPECT_NE(writer.status().message().find("not a kiln dataset"), std::string::npos);
  EXPECT_TRUE(fs::exists(out + "/important.txt"));
}

TEST(DatasetWriterTest, LeftoverStagingDirectoryIsRemoved) {
  TempDir tmp;
  const std::string out = tmp / "ds";
  fs::create_directories(out + ".partial/sub");
  std::ofstream(out + ".partial/" + kStagingMarkerFileName) << "kiln staging";
  std::ofstream(out + ".partial/shard-00007.kiln") << "junk from a crashed run";
  const TensorSchema schema = Schema(2, 2, 1);
  auto writer = DatasetWriter::Create(out, Options(schema));
  ASSERT_TRUE(writer.ok()) << writer.status().ToString();
  EXPECT_EQ(Names(out + ".partial"), std::vector<std::string>{kStagingMarkerFileName});
  ASSERT_TRUE((*writer)->Add(Record(schema, 0)).ok());
  ASSERT_TRUE((*writer)->Finish(Manifest{}).ok());
  EXPECT_EQ(Names(out), (std::vector<std::string>{"kiln.json", "shard-00000.kiln"}));
}

// A full disk gives an error naming the path, and no dataset under the output name. A
// file-size limit (RLIMIT_FSIZE) in a forked child stands in for the full disk: the write fails
// with EFBIG as it would with ENOSPC.
TEST(DatasetWriterTest, FullDiskNamesThePathAndLeavesNoDataset) {
  TempDir tmp;
  const std::string out = tmp / "ds";
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    std::signal(SIGXFSZ, SIG_IGN);  // get EFBIG from write() instead of being killed
    struct rlimit limit = {256 << 10, 256 << 10};
    if (::setrlimit(RLIMIT_FSIZE, &limit) != 0) ::_exit(10);
    const TensorSchema schema = Schema(64, 64, 3);  // 12 KiB records
    auto writer = DatasetWriter::Create(out, Options(schema, uint64_t{64} << 20));
    if (!writer.ok()) ::_exit(11);
    Status status;
    for (uint64_t i = 0; i < 1000 && status.ok(); ++i) status = (*writer)->Add(Record(schema, i));
    if (status.ok()) status = (*writer)->Finish(Manifest{}).status();
    if (status.ok()) ::_exit(12);
    if (status.message().find(out + ".partial/shard-00000.kiln") == std::string::npos) ::_exit(13);
    if (status.code() != StatusCode::kIOError) ::_exit(14);
    writer->reset();
    ::_exit(fs::exists(out) || fs::exists(out + ".partial") ? 15 : 0);
  }
  int wstatus = 0;
  ASSERT_EQ(::waitpid(child, &wstatus, 0), child);
  ASSERT_TRUE(WIFEXITED(wstatus));
  EXPECT_EQ(WEXITSTATUS(wstatus), 0) << "10 setrlimit, 11 create, 12 no error, 13 path not named, "
                                        "14 wrong code, 15 output left behind";
}

TEST(DatasetWriterTest, EmptyDataset) {
  TempDir tmp;
  const std::string out = tmp / "ds";
  auto writer = DatasetWriter::Create(out, Options(Schema(2, 2, 1)));
  ASSERT_TRUE(writer.ok());
  auto m = (*writer)->Finish(Manifest{});
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->samples, 0u);
  EXPECT_TRUE(m->files.empty());
  auto ds = Dataset::Open(out);
  ASSERT_TRUE(ds.ok()) << ds.status().ToString();
  EXPECT_EQ((*ds)->num_samples(), 0u);
}

TEST(DatasetWriterTest, AddRejectsRecordOfWrongSize) {
  TempDir tmp;
  auto writer = DatasetWriter::Create(tmp / "ds", Options(Schema(2, 2, 1)));
  ASSERT_TRUE(writer.ok());
  Status s = (*writer)->Add(Record(Schema(3, 3, 1), 0));
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ((*writer)->samples(), 0u);
}

// Cutting files at part boundaries and merging parts by moving files is a capability of a row
// (self_contained_files), read by the packer and the part merger instead of the name "shards".
TEST(DatasetWriterTest, SelfContainedFilesIsARegistryCapability) {
  EXPECT_TRUE(HasSelfContainedFiles("shards"));
  EXPECT_FALSE(HasSelfContainedFiles("lmdb"));
  EXPECT_FALSE(HasSelfContainedFiles("hdf5"));
  EXPECT_FALSE(HasSelfContainedFiles("no-such-format"));
  for (const StorageFormat& f : StorageFormats()) {
    EXPECT_EQ(HasSelfContainedFiles(f.name), f.self_contained_files) << f.name;
  }
}

// Resuming is a capability of a backend's registry row (its resume_writer), not of its name:
// the shard format has one, LMDB and HDF5 have none, and Resume refuses those with the message
// that `kiln pack --format lmdb --resume` prints after "--resume: ".
TEST(DatasetWriterTest, ResumeIsARegistryCapability) {
  EXPECT_TRUE(CanResumeFormat("shards"));
  EXPECT_FALSE(CanResumeFormat("lmdb"));
  EXPECT_FALSE(CanResumeFormat("hdf5"));
  EXPECT_FALSE(CanResumeFormat("no-such-format"));
  for (const StorageFormat& f : StorageFormats()) {
    EXPECT_EQ(CanResumeFormat(f.name), f.compiled_in && f.resume_writer != nullptr) << f.name;
  }
  EXPECT_EQ(ResumeNotSupportedMessage(), "resuming is implemented for the shards format only");
  TempDir tmp;
  for (const char* format : {"lmdb", "hdf5", "no-such-format"}) {
    DatasetWriterOptions o = Options(Schema(2, 2, 1));
    o.format = format;
    Result<std::unique_ptr<DatasetWriter>> w = DatasetWriter::Resume(tmp / "ds", o, {});
    ASSERT_FALSE(w.ok()) << format;
    EXPECT_EQ(w.status().code(), StatusCode::kNotSupported) << format;
    EXPECT_EQ(w.status().message(), "resuming is implemented for the shards format only") << format;
  }
}

TEST(DatasetWriterTest, RemoveTree) {
  TempDir tmp;
  fs::create_directories(tmp / "a/b/c");
  std::ofstream(tmp / "a/b/c/f") << "x";
  EXPECT_TRUE(RemoveTree(tmp / "a").ok());
  EXPECT_FALSE(fs::exists(tmp / "a"));
  EXPECT_TRUE(RemoveTree(tmp / "never-existed").ok());
}

}  // namespace
}  // namespace kiln
