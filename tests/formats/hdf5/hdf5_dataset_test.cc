// Tests for the HDF5 backend (formats/hdf5/hdf5_writer.h, formats/hdf5/hdf5_dataset.h,
// formats/hdf5/hdf5_verifier.h, layout in formats/hdf5/hdf5_format.md): round trips over every
// dtype, layout and codec, the layout HDF5 itself reports, corruption and truncation, opens while
// another process holds the file (its golden files are checked by tests/formats/golden_test.cc;
// read-only directories and 16 processes opening at once, for every backend, by
// tests/formats/conformance_test.cc). Field cases B19 and B26: the tests named after them.
#include "formats/hdf5/hdf5_dataset.h"

#include <gtest/gtest.h>
#include <hdf5.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "formats/dataset.h"
#include "formats/dataset_writer.h"
#include "formats/hdf5/hdf5_file.h"
#include "formats/hdf5/hdf5_format.h"
#include "formats/hdf5/hdf5_inspector.h"
#include "formats/verifier.h"
#include "tests/formats/backend_checks.h"
#include "tests/test_util.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;

TensorSchema Schema(uint32_t h, uint32_t w, uint32_t c, DType dtype = DType::kUint8,
                    Layout layout = Layout::kHWC) {
  return testing::MakeSchema(h, w, c, layout, dtype);
}

// Sample i's raw bytes: a compressible pattern, or noise (incompressible) when `noise`.
std::vector<uint8_t> Raw(const TensorSchema& schema, uint64_t i, bool noise = false) {
  return noise ? testing::NoiseBytes(schema, i) : testing::PatternBytes(schema, i, 16);
}

using testing::ClassKey;

struct WriteSpec {
  uint64_t n = 100;
  TensorSchema schema = Schema(4, 4, 3);
  Compression compression;
  // Samples whose index is a multiple of this are noise (stored raw even with zstd); 0: none.
  uint64_t noise_every = 0;
  bool Noise(uint64_t i) const { return noise_every != 0 && i % noise_every == 0; }
};

// Sample i of `spec`: Raw bytes (noise where spec says), label i mod 5, ClassKey(i); `raws`
// and `keys`, when given, replace the bytes and keys.
testing::SampleMaker Samples(const WriteSpec& spec,
                             const std::vector<std::vector<uint8_t>>* raws = nullptr,
                             const std::vector<std::string>* keys = nullptr) {
  testing::SampleMaker pattern =
      testing::PatternSamples(spec.schema, 16, [spec](uint64_t i) { return spec.Noise(i); });
  return [pattern, raws, keys](uint64_t i) {
    testing::TestSample s = pattern(i);
    if (raws) s.raw = (*raws)[i];
    if (keys) s.key = (*keys)[i];
    return s;
  };
}

Status WriteHdf5(const std::string& out, const WriteSpec& spec,
                 const std::vector<std::vector<uint8_t>>* raws = nullptr,
                 const std::vector<std::string>* keys = nullptr) {
  DatasetWriterOptions o;
  o.schema = spec.schema;
  o.format = "hdf5";
  Manifest m;
  // Part of the golden files' bytes: the name of the file that first wrote them, kept.
  m.tool = "kiln test (tests/formats/hdf5_dataset_test.cc)";
  m.classes = {"a", "b", "c", "d", "e"};
  return testing::WriteTestDataset(out, o, spec.compression, spec.n, Samples(spec, raws, keys), m)
      .status();
}

void ExpectReadsBack(const std::string& dir, const WriteSpec& spec) {
  testing::ExpectDatasetHolds(dir, spec.n, Samples(spec));
}

Hdf5Layout LayoutOf(const std::string& dir) {
  Result<Manifest> m = Manifest::Read(dir);
  EXPECT_TRUE(m.ok());
  Result<Hdf5Layout> l = Hdf5Inspector::Inspect(dir + "/data.h5", m->schema, m->samples, true);
  EXPECT_TRUE(l.ok()) << l.status().ToString();
  return l.ok() ? *l : Hdf5Layout{};
}

TEST(Hdf5Dataset, RoundTripEveryDtypeLayoutAndCodec) {
  TempDir tmp;
  for (DType dtype : {DType::kUint8, DType::kFloat16, DType::kFloat32}) {
    for (Layout layout : {Layout::kHWC, Layout::kCHW}) {
      for (const char* c : {"none", "zstd"}) {
        WriteSpec spec;
        spec.n = 60;
        spec.schema = Schema(5, 7, 3, dtype, layout);
        spec.compression = *Compression::Parse(c);
        spec.noise_every = 7;  // with zstd: some chunks stored raw (filter skipped)
        const std::string out =
            tmp / (std::string(DTypeName(dtype)) + "-" + std::string(LayoutName(layout)) + "-" + c);
        SCOPED_TRACE(out);
        Status s = WriteHdf5(out, spec);
        ASSERT_TRUE(s.ok()) << s.ToString();
        EXPECT_FALSE(fs::exists(out + ".partial"));
        std::vector<std::string> names;
        for (const auto& e : fs::directory_iterator(out)) names.push_back(e.path().filename());
        std::sort(names.begin(), names.end());
        EXPECT_EQ(names, (std::vector<std::string>{"data.h5", "kiln.json"}));  // staging gone
        Result<Manifest> m = Manifest::Read(out);
        ASSERT_TRUE(m.ok());
        EXPECT_EQ(m->format, "hdf5");
        ASSERT_EQ(m->files.size(), 1u);
        EXPECT_EQ(m->files[0].file, "data.h5");
        EXPECT_EQ(m->files[0].bytes, fs::file_size(out + "/data.h5"));
        ExpectReadsBack(out, spec);
        const Hdf5Layout l = LayoutOf(out);
        EXPECT_EQ(l.chunked, std::string(c) == "zstd");
        if (l.chunked) {
          ASSERT_EQ(l.chunks.size(), spec.n);
          EXPECT_EQ(l.chunks[0].codec, Codec::kNone);  // noise: zstd skipped, mask bit set
          EXPECT_EQ(l.chunks[1].codec, Codec::kZstd);
          EXPECT_LT(l.chunks[1].size, spec.schema.sample_bytes());
        } else {
          EXPECT_EQ(l.images_offset % 8, 0u);
        }
        // The attribute holds the manifest (all but the files list).
        Result<Manifest> inner = Manifest::FromJson(l.manifest_attr, "attr");
        ASSERT_TRUE(inner.ok()) << inner.status().ToString();
        EXPECT_EQ(inner->schema, spec.schema);
        EXPECT_EQ(inner->samples, spec.n);
        EXPECT_EQ(inner->format, "hdf5");
        const VerifyReport report = VerifyDataset(out, VerifyOptions{true});
        EXPECT_TRUE(report.ok()) << VerifyReportToText(report);
        EXPECT_EQ(report.records_checked, spec.n);
      }
    }
  }
}

// What the HDF5 library itself reports: the documented datasets, types and shapes.
// Declaring the optional zstd filter (32015) made libhdf5 dlopen every plugin on its plugin path
// at H5Dcreate, running third-party code in `kiln pack` (Debian's zfp plugin leaks on load:
// tests/SANITIZERS.md). The writer turns plugin loading off around it and restores the state.
TEST(Hdf5Dataset, WriterLoadsNoFilterPlugin) {
  TempDir tmp;
  const std::string marker = tmp / "spy-plugin-loaded";
  ASSERT_EQ(::setenv("KILN_SPY_PLUGIN_MARKER", marker.c_str(), 1), 0);
  // The spy's folder only: the installed plugins stay out of this process (Debian's zfp plugin
  // leaks on load, which would fail the control below under LeakSanitizer).
  unsigned paths = 0;
  ASSERT_GE(H5PLsize(&paths), 0);
  for (; paths > 0; --paths) ASSERT_GE(H5PLremove(0), 0);
  ASSERT_GE(H5PLappend(KILN_SPY_PLUGIN_DIR), 0);
  unsigned state_before = 0;
  ASSERT_GE(H5PLget_loading_state(&state_before), 0);
  WriteSpec spec;
  spec.compression = *Compression::Parse("zstd:3");
  spec.noise_every = 3;
  ASSERT_TRUE(WriteHdf5(tmp / "ds", spec).ok());
  EXPECT_FALSE(fs::exists(marker)) << "writing a zstd HDF5 file made libhdf5 load plugins";
  unsigned state_after = 0;
  ASSERT_GE(H5PLget_loading_state(&state_after), 0);
  EXPECT_EQ(state_after, state_before) << "the writer did not restore plugin loading";
  ExpectReadsBack(tmp / "ds", spec);
  // Control: asking libhdf5 for the filter searches the plugin path and loads the spy, so the
  // check above can fail.
  (void)H5Zfilter_avail(kHdf5ZstdFilterId);
  H5Eclear2(H5E_DEFAULT);
  EXPECT_TRUE(fs::exists(marker)) << "the spy plugin in " << KILN_SPY_PLUGIN_DIR
                                  << " was never loaded";
}

TEST(Hdf5Dataset, LibrarySeesDocumentedSchema) {
  TempDir tmp;
  WriteSpec spec;
  spec.n = 10;
  spec.schema = Schema(2, 3, 1, DType::kFloat16, Layout::kCHW);
  ASSERT_TRUE(WriteHdf5(tmp / "ds", spec).ok());
  Hdf5Lock lock;
  Hdf5Id fapl = Hdf5FileAccess();
  Hdf5Id file(H5Fopen((tmp / "ds/data.h5").c_str(), H5F_ACC_RDONLY, fapl.get()));
  ASSERT_TRUE(file.valid());
  Hdf5Id images(H5Dopen2(file.get(), "images", H5P_DEFAULT));
  ASSERT_TRUE(images.valid());
  Hdf5Id type(H5Dget_type(images.get()));
  EXPECT_EQ(H5Tget_class(type.get()), H5T_FLOAT);
  EXPECT_EQ(H5Tget_size(type.get()), 2u);
  EXPECT_EQ(H5Tget_ebias(type.get()), 15u);
  Hdf5Id space(H5Dget_space(images.get()));
  hsize_t dims[4];
  ASSERT_EQ(H5Sget_simple_extent_dims(space.get(), dims, nullptr), 4);
  EXPECT_EQ(std::vector<hsize_t>(dims, dims + 4), (std::vector<hsize_t>{10, 1, 2, 3}));  // N,C,H,W
  for (const char* name : {"labels", "keys", "checksums"}) {
    Hdf5Id d(H5Dopen2(file.get(), name, H5P_DEFAULT));
    EXPECT_TRUE(d.valid()) << name;
  }
  Hdf5Id keys(H5Dopen2(file.get(), "keys", H5P_DEFAULT));
  Hdf5Id ktype(H5Dget_type(keys.get()));
  EXPECT_EQ(H5Tget_cset(ktype.get()), H5T_CSET_UTF8);
  EXPECT_EQ(H5Tget_strpad(ktype.get()), H5T_STR_NULLPAD);
  EXPECT_GT(H5Aexists(file.get(), "kiln_manifest"), 0);
  EXPECT_GT(H5Aexists(file.get(), "kiln_hdf5_version"), 0);
}

TEST(Hdf5Dataset, EmptyDatasetRoundTrips) {
  TempDir tmp;
  for (const char* c : {"none", "zstd"}) {
    WriteSpec spec;
    spec.n = 0;
    spec.compression = *Compression::Parse(c);
    const std::string out = tmp / c;
    Status s = WriteHdf5(out, spec);
    ASSERT_TRUE(s.ok()) << s.ToString();
    ExpectReadsBack(out, spec);
    EXPECT_TRUE(VerifyDataset(out, VerifyOptions{true}).ok());
  }
}

// Fetch threads never call HDF5: many threads read one dataset at once.
TEST(Hdf5Dataset, ConcurrentReadsFromManyThreads) {
  TempDir tmp;
  for (const char* c : {"none", "zstd"}) {
    WriteSpec spec;
    spec.n = 400;
    spec.compression = *Compression::Parse(c);
    const std::string out = tmp / c;
    ASSERT_TRUE(WriteHdf5(out, spec).ok());
    auto ds = Dataset::Open(out);
    ASSERT_TRUE(ds.ok());
    std::atomic<int> bad{0};
    std::vector<std::thread> threads;
    for (int t = 0; t < 8; ++t) {
      threads.emplace_back([&, t] {
        RecordDecoder dec;
        std::vector<uint8_t> buf(spec.schema.sample_bytes());
        for (uint64_t i = t; i < spec.n; i += 3) {
          int64_t label;
          (*ds)->Prefetch(i, true);
          if (!(*ds)->ReadSample(i, &dec, buf.data(), &label).ok() || buf != Raw(spec.schema, i))
            ++bad;
        }
      });
    }
    for (auto& th : threads) th.join();
    EXPECT_EQ(bad.load(), 0);
  }
}

// B19 concerns "encoded mode" (JPEG/PNG bytes stored as blobs), where a C string type silently
// truncates at the first 0x00. kiln has no encoded mode: it stores decoded tensors, and `images`
// has a numeric element type (uint8, float16, float32) with a fixed sample size, so no string type
// ever holds sample bytes and a 0x00 cannot end a sample early. This test proves the concern does
// not apply: samples that are all zeros, or that start like a JPEG (ff d8 ff e0 00 10 ...) and a
// PNG (89 50 4e 47 0d 0a 1a 0a 00 00 ...) with 0x00 in their first 20 bytes, come back with
// exactly their length and bytes, raw and zstd; and the one string dataset, `keys`, round-trips
// UTF-8 keys exactly, while a key holding a NUL byte (impossible for a file path) is refused
// instead of being truncated.
TEST(Hdf5Dataset, FieldCase_B19_ZeroBytesRoundTripExactly) {
  TempDir tmp;
  const TensorSchema schema = Schema(4, 8, 3);
  const std::vector<uint8_t> jpeg = {0xff, 0xd8, 0xff, 0xe0, 0x00, 0x10, 'J',  'F',  'I',  'F',
                                     0x00, 0x01, 0x01, 0x00, 0x00, 0x01, 0x00, 0x01, 0x00, 0x00};
  const std::vector<uint8_t> png = {0x89, 'P',  'N', 'G', 0x0d, 0x0a, 0x1a, 0x0a, 0x00, 0x00,
                                    0x00, 0x0d, 'I', 'H', 'D',  'R',  0x00, 0x00, 0x00, 0x40};
  std::vector<std::vector<uint8_t>> raws(4, std::vector<uint8_t>(schema.sample_bytes(), 0));
  std::copy(jpeg.begin(), jpeg.end(), raws[1].begin());
  std::copy(png.begin(), png.end(), raws[2].begin());
  raws[3] = Raw(schema, 3, true);
  raws[3][0] = 0;
  raws[3].back() = 0;
  const std::vector<std::string> keys = {"zeros/all.raw", "jpeg/ä ö ü.jpg", "png/图像 1.png",
                                         "x/\xF0\x9F\x98\x80 end.png"};
  for (const char* c : {"none", "zstd"}) {
    WriteSpec spec;
    spec.n = raws.size();
    spec.schema = schema;
    spec.compression = *Compression::Parse(c);
    const std::string out = tmp / c;
    Status s = WriteHdf5(out, spec, &raws, &keys);
    ASSERT_TRUE(s.ok()) << s.ToString();
    auto ds = Dataset::Open(out);
    ASSERT_TRUE(ds.ok()) << ds.status().ToString();
    RecordDecoder dec;
    for (uint64_t i = 0; i < raws.size(); ++i) {
      std::vector<uint8_t> got(schema.sample_bytes() + 16, 0xaa);
      int64_t label;
      ASSERT_TRUE((*ds)->ReadSample(i, &dec, got.data(), &label).ok());
      EXPECT_TRUE(std::equal(raws[i].begin(), raws[i].end(), got.begin())) << c << " sample " << i;
      EXPECT_EQ(got[schema.sample_bytes()], 0xaa);  // exactly sample_bytes written, no more
      EXPECT_EQ(*(*ds)->Key(i), keys[i]);
    }
    const Hdf5Layout l = LayoutOf(out);
    if (!l.chunked) {
      // In the file: sample 1 is exactly its bytes, at its fixed place, 0x00s included.
      const std::vector<uint8_t> file = testing::ReadFileBytes(out + "/data.h5");
      EXPECT_TRUE(
          std::equal(raws[1].begin(), raws[1].end(),
                     file.begin() + static_cast<long>(l.images_offset + schema.sample_bytes())));
    }
  }
  // A NUL inside a key would be cut short by every HDF5 reader: refused, not truncated.
  DatasetWriterOptions o;
  o.schema = schema;
  o.format = "hdf5";
  auto w = DatasetWriter::Create(tmp / "nul", o);
  ASSERT_TRUE(w.ok());
  RecordEncoder enc(Compression{});
  EncodedRecord rec;
  ASSERT_TRUE(enc.Encode(raws[0].data(), raws[0].size(), 0, std::string("a\0b", 3), &rec).ok());
  Status s = (*w)->Add(rec);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("NUL"), std::string::npos) << s.message();
}

// Child body: opens the dataset and reads every sample; 0 when all match.
int OpenAndReadAll(const std::string& dir, const WriteSpec& spec) {
  auto ds = Dataset::Open(dir);
  if (!ds.ok()) {
    std::fprintf(stderr, "%s\n", ds.status().ToString().c_str());
    return 2;
  }
  RecordDecoder dec;
  std::vector<uint8_t> buf(spec.schema.sample_bytes());
  for (uint64_t i = 0; i < spec.n; ++i) {
    int64_t label;
    if (!(*ds)->ReadSample(i, &dec, buf.data(), &label).ok()) return 3;
    if (buf != Raw(spec.schema, i)) return 4;
  }
  return 0;
}

// B26: one process holds data.h5 open read-only through HDF5 with the library's default file
// locking (as h5py does) while 16 others open the dataset at once, and while it is verified.
TEST(Hdf5Dataset, FieldCase_B26_OpensWhileAnotherProcessHoldsTheFile) {
  TempDir tmp;
  WriteSpec spec;
  spec.n = 64;
  const std::string out = tmp / "ds";
  ASSERT_TRUE(WriteHdf5(out, spec).ok());
  int ready[2], release[2];
  ASSERT_EQ(::pipe(ready), 0);
  ASSERT_EQ(::pipe(release), 0);
  const pid_t holder = ::fork();
  ASSERT_GE(holder, 0);
  if (holder == 0) {
    ::close(ready[0]);
    ::close(release[1]);
    int code = 0;
    {
      Hdf5Lock lock;
      hid_t f = H5Fopen((out + "/data.h5").c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);  // locks
      if (f < 0) code = 5;
      (void)!::write(ready[1], "x", 1);
      char c;
      (void)!::read(release[0], &c, 1);  // hold the file until the parent is done
      if (f >= 0) H5Fclose(f);
    }
    ::_exit(code);
  }
  ::close(ready[1]);
  ::close(release[0]);
  char c = 0;
  ASSERT_EQ(::read(ready[0], &c, 1), 1);
  for (int rep = 0; rep < 3; ++rep) {
    EXPECT_EQ(testing::RunAtOnce(16, [&] { return OpenAndReadAll(out, spec); }),
              std::vector<int>(16, 0));
  }
  EXPECT_TRUE(VerifyDataset(out, VerifyOptions{}).ok());
  ::close(release[1]);
  int status = 0;
  ASSERT_EQ(::waitpid(holder, &status, 0), holder);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

TEST(Hdf5Dataset, FlippedByteIsNamedByVerifierAndReader) {
  TempDir tmp;
  for (const char* c : {"none", "zstd"}) {
    WriteSpec spec;
    spec.n = 100;
    spec.compression = *Compression::Parse(c);
    const std::string out = tmp / c;
    ASSERT_TRUE(WriteHdf5(out, spec).ok());
    const Hdf5Layout l = LayoutOf(out);
    const Hdf5Layout::Chunk victim = l.Stored(17);
    std::vector<uint8_t> file = testing::ReadFileBytes(out + "/data.h5");
    file[victim.offset + victim.size / 2] ^= 0x40;
    testing::WriteFileBytes(out + "/data.h5", file);

    const testing::DamagedRecordErrors e = testing::ExpectDamagedRecordNamed(
        out, out + "/data.h5", spec.n, 17, static_cast<int64_t>(victim.offset));
    EXPECT_NE(e.read.message().find("data.h5 sample 17 (offset " + std::to_string(victim.offset)),
              std::string::npos)
        << e.read.message();
  }
}

// Keys have no per-sample checksum; the keys checksum attribute (hdf5_format.md
// section 3) makes Key fail, naming data.h5 and the keys' offset, instead of returning a damaged
// key, while samples still read; verify names the same offset.
TEST(Hdf5Dataset, DamagedKeyIsNeverReturned) {
  TempDir tmp;
  WriteSpec spec;
  spec.n = 40;
  const std::string out = tmp / "keys";
  ASSERT_TRUE(WriteHdf5(out, spec).ok());
  const Hdf5Layout l = LayoutOf(out);
  ASSERT_TRUE(l.has_keys_checksum);
  ASSERT_EQ(l.version, 2);
  std::vector<uint8_t> file = testing::ReadFileBytes(out + "/data.h5");
  file[l.keys_offset + 7 * l.key_width + 2] ^= 0x01;  // sample 7's key, third byte
  testing::WriteFileBytes(out + "/data.h5", file);

  auto ds = Dataset::Open(out);
  ASSERT_TRUE(ds.ok()) << ds.status().ToString();
  for (uint64_t i : {uint64_t{7}, uint64_t{0}}) {  // every key: the damage is not localised
    Result<std::string> key = (*ds)->Key(i);
    ASSERT_FALSE(key.ok()) << *key;
    EXPECT_EQ(key.status().code(), StatusCode::kCorruption);
    EXPECT_NE(key.status().message().find("data.h5 sample " + std::to_string(i)), std::string::npos)
        << key.status().message();
    EXPECT_NE(key.status().message().find("keys checksum mismatch"), std::string::npos)
        << key.status().message();
  }
  RecordDecoder dec;
  std::vector<uint8_t> buf(spec.schema.sample_bytes());
  int64_t label;
  EXPECT_TRUE((*ds)->ReadSample(7, &dec, buf.data(), &label).ok());  // pixels are intact
  EXPECT_EQ(buf, Raw(spec.schema, 7));

  const VerifyReport report = VerifyDataset(out, VerifyOptions{});
  bool named = false;
  for (const VerifyProblem& p : report.problems) {
    if (p.reason.find("keys checksum mismatch") != std::string::npos) {
      named = true;
      EXPECT_EQ(p.file, out + "/data.h5");
      EXPECT_EQ(p.offset, static_cast<int64_t>(l.keys_offset));
    }
  }
  EXPECT_TRUE(named) << VerifyReportToText(report);
}

// A version-1 file (before the keys checksum) still reads; one of an unknown version does not.
TEST(Hdf5Dataset, VersionOneReadsAndUnknownVersionIsNotSupported) {
  TempDir tmp;
  WriteSpec spec;
  spec.n = 10;
  const std::string out = tmp / "v1";
  ASSERT_TRUE(WriteHdf5(out, spec).ok());
  auto rewrite = [&](int32_t version, bool drop_keys_checksum) {
    Hdf5Lock lock;
    Hdf5Id f(H5Fopen((out + "/data.h5").c_str(), H5F_ACC_RDWR, H5P_DEFAULT));
    ASSERT_TRUE(f.valid());
    Hdf5Id attr(H5Aopen(f.get(), kHdf5VersionAttr, H5P_DEFAULT));
    ASSERT_GE(H5Awrite(attr.get(), H5T_NATIVE_INT32, &version), 0);
    if (drop_keys_checksum) {
      ASSERT_GE(H5Adelete_by_name(f.get(), kHdf5KeysName, kHdf5KeysChecksumAttr, H5P_DEFAULT), 0);
    }
  };
  auto reseal = [&] {  // the manifest lists data.h5's size and hash
    Result<Manifest> m = Manifest::Read(out);
    ASSERT_TRUE(m.ok());
    m->files[0].bytes = fs::file_size(out + "/data.h5");
    const std::vector<uint8_t> bytes = testing::ReadFileBytes(out + "/data.h5");
    m->files[0].xxh3_64 = XXH3_64bits(bytes.data(), bytes.size());
    ASSERT_TRUE(m->Write(out).ok());
  };
  ASSERT_NO_FATAL_FAILURE(rewrite(1, true));
  ASSERT_NO_FATAL_FAILURE(reseal());
  EXPECT_FALSE(LayoutOf(out).has_keys_checksum);
  ASSERT_NO_FATAL_FAILURE(ExpectReadsBack(out, spec));
  EXPECT_TRUE(VerifyDataset(out, VerifyOptions{}).ok());
  // Version 2 without the attribute is damage, not an old file.
  ASSERT_NO_FATAL_FAILURE(rewrite(2, false));
  ASSERT_NO_FATAL_FAILURE(reseal());
  Result<std::unique_ptr<Dataset>> ds = Dataset::Open(out);
  EXPECT_EQ(ds.status().code(), StatusCode::kCorruption);
  EXPECT_NE(ds.status().message().find("xxh3_64"), std::string::npos) << ds.status().message();
  ASSERT_NO_FATAL_FAILURE(rewrite(3, false));
  ASSERT_NO_FATAL_FAILURE(reseal());
  ds = Dataset::Open(out);
  EXPECT_EQ(ds.status().code(), StatusCode::kNotSupported);
  EXPECT_NE(ds.status().message().find("kiln_hdf5_version 3"), std::string::npos)
      << ds.status().message();
}

TEST(Hdf5Dataset, TruncatedFileIsNamed) {
  TempDir tmp;
  for (const char* c : {"none", "zstd"}) {
    WriteSpec spec;
    spec.n = 200;
    spec.schema = Schema(16, 16, 3);
    spec.compression = *Compression::Parse(c);
    const std::string out = tmp / c;
    ASSERT_TRUE(WriteHdf5(out, spec).ok());
    const std::string path = out + "/data.h5";
    fs::resize_file(path, fs::file_size(path) / 2);

    auto ds = Dataset::Open(out);
    EXPECT_EQ(ds.status().code(), StatusCode::kCorruption);
    EXPECT_NE(ds.status().message().find(path), std::string::npos) << ds.status().message();
    EXPECT_NE(ds.status().message().find("truncated"), std::string::npos) << ds.status().message();
    const VerifyReport report = VerifyDataset(out, VerifyOptions{});
    EXPECT_FALSE(report.ok());
    for (const VerifyProblem& p : report.problems) EXPECT_EQ(p.file, path);

    // Even with a manifest that agrees with the cut size, HDF5's end-of-file check or the
    // offset checks refuse the file at open, naming it: nothing is read past the end.
    Result<Manifest> m = Manifest::Read(out);
    ASSERT_TRUE(m.ok());
    m->files[0].bytes = fs::file_size(path);
    ASSERT_TRUE(m->Write(out).ok());
    ds = Dataset::Open(out);
    EXPECT_FALSE(ds.ok());
    EXPECT_NE(ds.status().message().find(path), std::string::npos) << ds.status().message();
  }
}

TEST(Hdf5Dataset, OpenChecksManifestAgainstFile) {
  TempDir tmp;
  WriteSpec spec;
  spec.n = 50;
  const std::string out = tmp / "ds";
  ASSERT_TRUE(WriteHdf5(out, spec).ok());
  Result<Manifest> m = Manifest::Read(out);
  ASSERT_TRUE(m.ok());
  Manifest wrong = *m;
  wrong.samples = 51;
  wrong.files[0].samples = 51;
  ASSERT_TRUE(wrong.Write(out).ok());
  auto ds = Dataset::Open(out);
  EXPECT_EQ(ds.status().code(), StatusCode::kCorruption);
  EXPECT_NE(ds.status().message().find("images"), std::string::npos) << ds.status().message();
  EXPECT_FALSE(VerifyDataset(out, VerifyOptions{}).ok());
  wrong = *m;
  wrong.schema.dtype = DType::kFloat16;
  wrong.schema.channels = 1;  // the same bytes per sample, another element type
  wrong.schema.width = 6;
  ASSERT_TRUE(wrong.Write(out).ok());
  ds = Dataset::Open(out);
  EXPECT_EQ(ds.status().code(), StatusCode::kCorruption);
  EXPECT_NE(ds.status().message().find("element type"), std::string::npos) << ds.status().message();
  ASSERT_TRUE(m->Write(out).ok());
  EXPECT_TRUE(Dataset::Open(out).ok());
  fs::remove(out + "/data.h5");
  EXPECT_EQ(Dataset::Open(out).status().code(), StatusCode::kNotFound);
}

TEST(Hdf5Dataset, NotAnHdf5FileIsNamed) {
  TempDir tmp;
  WriteSpec spec;
  spec.n = 5;
  const std::string out = tmp / "ds";
  ASSERT_TRUE(WriteHdf5(out, spec).ok());
  const std::string path = out + "/data.h5";
  std::vector<uint8_t> file = testing::ReadFileBytes(path);
  std::fill(file.begin(), file.begin() + 8, 0);  // the superblock signature
  testing::WriteFileBytes(path, file);
  auto ds = Dataset::Open(out);
  ASSERT_FALSE(ds.ok());
  EXPECT_NE(ds.status().message().find(path), std::string::npos) << ds.status().message();
  EXPECT_NE(ds.status().message().find("HDF5"), std::string::npos) << ds.status().message();
  EXPECT_EQ(ds.status().location().file, path);
}

}  // namespace
}  // namespace kiln
