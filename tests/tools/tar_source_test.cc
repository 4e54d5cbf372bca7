// WebDataset tar shards as converter input (tools/sources/tar_source.h): shards written by GNU tar
// and by Python's tarfile from the shipped sample photos, flat and with directories in the keys,
// names with dots and Unicode, a non-image member, samples with no image or two, a truncated
// last member; the packed tensors equal those of the same images packed as an ImageFolder.
#include "tools/sources/tar_source.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "formats/dataset.h"
#include "tests/test_util.h"
#include "tests/tools/pack_and_read.h"
#include "tools/pack/packer.h"
#include "tools/pack/part_merger.h"
#include "tools/pack/partition.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;
using testing::PackAndRead;
using testing::Packed;
using testing::PackInputOptions;
using testing::ShardBytes;

const std::string kPhotos = std::string(KILN_SOURCE_DIR) + "/samples/photos";

// Runs a Python program with /usr/bin/python3 (Debian's, in scripts/setup.sh).
int RunPython(const std::string& dir, const std::string& program) {
  const std::string script = dir + "/make.py";
  testing::WriteFileString(script, program);
  return std::system(("/usr/bin/python3 '" + script + "'").c_str());
}

TEST(TarSourceTest, BraceAndGlobPatternsExpandInOrder) {
  const TempDir tmp;
  const std::string& dir = tmp.path();
  for (const char* n : {"000000.tar", "000001.tar", "000002.tar", "000010.tar"}) {
    testing::WriteFileString(dir + "/" + n, "");
  }
  Result<std::vector<std::string>> r = ExpandShardInput(dir + "/{000000..000002}.tar");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(*r, (std::vector<std::string>{dir + "/000000.tar", dir + "/000001.tar",
                                          dir + "/000002.tar"}));
  r = ExpandShardInput(dir + "/0000{0,1}*.tar");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->size(), 4u);
  EXPECT_EQ(r->back(), dir + "/000010.tar");
  r = ExpandShardInput(dir);  // a directory of shards
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->size(), 4u);
  EXPECT_TRUE(IsTarInput(dir));
  EXPECT_TRUE(IsTarInput(dir + "/{000000..000002}.tar"));
  EXPECT_FALSE(IsTarInput(kPhotos));  // an ImageFolder tree
  r = ExpandShardInput(dir + "/{000000..000003}.tar");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("000003.tar"), std::string::npos) << r.status().ToString();
  EXPECT_FALSE(ExpandShardInput(dir + "/{000000..000003.tar").ok());
}

// GNU tar over samples/photos: keys "animal/baboon" etc., classes from the key's folder; the
// tensors and labels equal kiln pack of samples/photos as an ImageFolder, for 1 and 2 threads.
TEST(TarSourceTest, GnuTarShardEqualsTheImageFolder) {
  const TempDir tmp;
  const std::string& dir = tmp.path();
  const std::string shard = dir + "/photos-000000.tar";
  ASSERT_EQ(
      std::system(
          ("tar -C '" + kPhotos + "' -cf '" + shard + "' animal fruit letter_f scene").c_str()),
      0);
  PackOptions tar = PackInputOptions(shard, dir + "/tar.kiln");
  tar.tar.label_from = "class-folder";
  const Packed from_tar = PackAndRead(tar);
  PackOptions folder = PackInputOptions(kPhotos, dir + "/folder.kiln");
  const Packed from_folder = PackAndRead(folder);
  ASSERT_EQ(from_folder.tensors.size(), 23u);
  ASSERT_EQ(from_tar.tensors.size(), 23u);
  EXPECT_EQ(from_tar.report.skipped, 4u);  // the four directory entries
  EXPECT_EQ(from_tar.report.rejected, 0u);
  EXPECT_EQ(from_tar.report.manifest.classes, from_folder.report.manifest.classes);
  for (const auto& [key, tensor] : from_folder.tensors) {
    const std::string tar_key = key.substr(0, key.rfind('.'));
    ASSERT_EQ(from_tar.tensors.count(tar_key), 1u) << tar_key;
    EXPECT_EQ(from_tar.tensors.at(tar_key), tensor) << key;
    EXPECT_EQ(from_tar.labels.at(tar_key), from_folder.labels.at(key)) << key;
  }
  PackOptions one_thread = tar;
  one_thread.threads = 1;
  one_thread.output = dir + "/tar1.kiln";
  ASSERT_TRUE(Pack(one_thread).ok());
  const std::string bytes = ShardBytes(tar.output);
  EXPECT_GT(bytes.size(), 23u * 48 * 48 * 3);
  EXPECT_TRUE(ShardBytes(one_thread.output) == bytes);
}

// Python's tarfile (PAX, UTF-8 names) writes a flat shard with KEY.cls labels and one with
// directories in the keys, Unicode and dots in the names, a non-image member, and samples
// with no image or two; across two shards named by a brace pattern.
TEST(TarSourceTest, PythonTarfileShardsAccountForEveryMember) {
  const TempDir tmp;
  const std::string& dir = tmp.path();
  ASSERT_EQ(RunPython(dir, R"PY(
import io, os, tarfile
photos = ")PY" + kPhotos + R"PY("
dir = ")PY" + dir + R"PY("
def add(t, name, data):
    info = tarfile.TarInfo(name)
    info.size = len(data)
    t.addfile(info, io.BytesIO(data))
def photo(p):
    return open(os.path.join(photos, p), "rb").read()
with tarfile.open(os.path.join(dir, "shard-000000.tar"), "w", format=tarfile.PAX_FORMAT) as t:
    add(t, "s000.jpg", photo("animal/baboon.jpg")); add(t, "s000.cls", b"3\n")
    add(t, "s001.jpg", photo("fruit/apple.jpg")); add(t, "s001.cls", b"1")
    add(t, "s001.txt", b"a caption")  # not an image or label member: skipped
with tarfile.open(os.path.join(dir, "shard-000001.tar"), "w", format=tarfile.PAX_FORMAT) as t:
    add(t, "caf\u00e9/b\u00e4by.jpg", photo("animal/butterfly.jpg")); add(t, "caf\u00e9/b\u00e4by.cls", b"2")
    add(t, "v1.2/img.jpg", photo("scene/home.jpg")); add(t, "v1.2/img.cls", b"0")
    add(t, "v1.2/img.seg.png", b"not used")  # extension seg.png: not an image member
    add(t, "lonely.cls", b"5")  # no image
    add(t, "twice.jpg", photo("fruit/orange.jpg")); add(t, "twice.png", b"x"); add(t, "twice.cls", b"1")
    add(t, "badlabel.jpg", photo("fruit/orange.jpg")); add(t, "badlabel.cls", b"cat")
)PY"),
            0);
  const Packed p =
      PackAndRead(PackInputOptions(dir + "/shard-{000000..000001}.tar", dir + "/out.kiln"));
  const PackReport& r = p.report;
  EXPECT_EQ(r.packed, 4u);
  EXPECT_EQ(r.rejected, 3u);
  EXPECT_EQ(r.listed, 7u);
  EXPECT_EQ(r.skipped, 2u);  // s001.txt and v1.2/img.seg.png
  ASSERT_EQ(p.tensors.size(), 4u);
  EXPECT_EQ(p.labels.at("s000"), 3);
  EXPECT_EQ(p.labels.at("s001"), 1);
  EXPECT_EQ(p.labels.at("caf\u00e9/b\u00e4by"), 2);
  EXPECT_EQ(p.labels.at("v1.2/img"), 0);
  std::string reasons;
  for (const Rejection& x : r.rejections) reasons += x.path + ": " + x.reason + "\n";
  EXPECT_NE(reasons.find("sample lonely has no image member"), std::string::npos) << reasons;
  EXPECT_NE(reasons.find("sample twice has 2 image members (twice.jpg, twice.png, twice.cls)"),
            std::string::npos)
      << reasons;
  EXPECT_NE(reasons.find("badlabel.cls at byte offset"), std::string::npos) << reasons;
  EXPECT_NE(reasons.find("not an integer label"), std::string::npos) << reasons;

  // The same images as an ImageFolder give the same tensors.
  const std::string folder = dir + "/folder";
  fs::create_directories(folder + "/c");
  const std::map<std::string, std::string> source = {
      {"s000", "animal/baboon.jpg"},
      {"s001", "fruit/apple.jpg"},
      {"caf\u00e9/b\u00e4by", "animal/butterfly.jpg"},
      {"v1.2/img", "scene/home.jpg"}};
  for (const auto& [key, file] : source) {
    fs::copy_file(kPhotos + "/" + file, folder + "/c/" + fs::path(file).filename().string());
  }
  const Packed f = PackAndRead(PackInputOptions(folder, dir + "/folder.kiln"));
  for (const auto& [key, file] : source) {
    const std::string folder_key = "c/" + fs::path(file).filename().string();
    ASSERT_EQ(f.tensors.count(folder_key), 1u);
    EXPECT_EQ(p.tensors.at(key), f.tensors.at(folder_key)) << key;
  }
}

// json:FIELD labels, and a shard cut inside its last member: the samples before it are packed,
// the cut one is a rejection naming the member and its byte offset.
TEST(TarSourceTest, JsonLabelsAndATruncatedLastMember) {
  const TempDir tmp;
  const std::string& dir = tmp.path();
  ASSERT_EQ(RunPython(dir, R"PY(
import io, json, os, tarfile
photos = ")PY" + kPhotos + R"PY("
path = os.path.join(")PY" + dir +
                               R"PY(", "cut.tar")
names = ["animal/baboon.jpg", "fruit/apple.jpg", "scene/building.jpg"]
with tarfile.open(path, "w", format=tarfile.GNU_FORMAT) as t:
    for i, n in enumerate(names):
        for name, data in ((f"k{i}.json", json.dumps({"label": 10 + i}).encode()),
                           (f"k{i}.jpg", open(os.path.join(photos, n), "rb").read())):
            info = tarfile.TarInfo(name); info.size = len(data); t.addfile(info, io.BytesIO(data))
with tarfile.open(path) as t:
    last = t.getmembers()[-1]
    cut = last.offset_data + last.size // 2
os.truncate(path, cut)
)PY"),
            0);
  PackOptions o = PackInputOptions(dir + "/cut.tar", dir + "/out.kiln");
  o.tar.label_from = "json:label";
  const Packed p = PackAndRead(o);
  EXPECT_EQ(p.report.packed, 2u);
  EXPECT_EQ(p.report.rejected, 1u);
  EXPECT_EQ(p.report.listed, 3u);
  EXPECT_EQ(p.labels.at("k0"), 10);
  EXPECT_EQ(p.labels.at("k1"), 11);
  ASSERT_EQ(p.report.rejections.size(), 1u);
  const Rejection& x = p.report.rejections[0];
  EXPECT_NE(x.path.find("cut.tar"), std::string::npos) << x.path;
  EXPECT_NE(x.reason.find("k2.jpg at byte offset"), std::string::npos) << x.reason;
  EXPECT_NE(x.reason.find("runcated"), std::string::npos) << x.reason;
}

// Bytes after a tar's end-of-archive marker (and its zero padding) are a rejection naming them as
// junk after the marker, with the marker's and the junk's byte offsets; the marker is not called
// missing. A shard whose marker is followed by zeros only gets no warning and no rejection.
TEST(TarSourceTest, JunkAfterTheEndOfArchiveMarkerIsNamedWithItsOffset) {
  const TempDir tmp;
  const std::string& dir = tmp.path();
  ASSERT_EQ(RunPython(dir, R"PY(
import io, os, tarfile
dir = ")PY" + dir + R"PY("
for name in ("clean.tar", "junk.tar"):
    with tarfile.open(os.path.join(dir, name), "w", format=tarfile.GNU_FORMAT) as t:
        data = open(")PY" + kPhotos +
                               R"PY(/fruit/apple.jpg", "rb").read()
        for member, body in (("k0.jpg", data), ("k0.cls", b"3")):
            info = tarfile.TarInfo(member); info.size = len(body); t.addfile(info, io.BytesIO(body))
    with tarfile.open(os.path.join(dir, name)) as t:
        last = t.getmembers()[-1]
        print(last.offset_data + (last.size + 511) // 512 * 512, file=open(os.path.join(dir, name + ".marker"), "w"))
)PY"),
            0);
  const uint64_t padded = fs::file_size(dir + "/junk.tar");
  {
    std::ofstream out(dir + "/junk.tar", std::ios::binary | std::ios::app);
    out << "not a tar member";
  }
  const std::string marker = testing::ReadFileString(dir + "/junk.tar.marker");
  TarListOptions options;
  Result<SourceListing> clean = ListTarShards({dir + "/clean.tar"}, options);
  ASSERT_TRUE(clean.ok()) << clean.status().ToString();
  EXPECT_TRUE(clean->warnings.empty()) << clean->warnings[0];
  EXPECT_TRUE(clean->problems.empty()) << clean->problems[0].reason;
  Result<SourceListing> junk = ListTarShards({dir + "/junk.tar"}, options);
  ASSERT_TRUE(junk.ok()) << junk.status().ToString();
  EXPECT_EQ(junk->items.size(), 1u);
  EXPECT_TRUE(junk->warnings.empty()) << junk->warnings[0];
  ASSERT_EQ(junk->problems.size(), 1u);  // a rejection: the dataset records what was not read
  EXPECT_EQ(junk->problems[0].path, dir + "/junk.tar");
  const std::string w = junk->problems[0].path + ": " + junk->problems[0].reason;
  EXPECT_EQ(w.rfind(dir +
                        "/junk.tar: 16 bytes of junk after the end-of-archive marker (at byte "
                        "offset " +
                        marker.substr(0, marker.find('\n')) + "), from byte offset " +
                        std::to_string(padded),
                    0),
            0u)
      << w;
  EXPECT_EQ(w.find("no end-of-archive marker"), std::string::npos) << w;
}

TEST(TarSourceTest, BadLabelSourceAndShuffleAreRefused) {
  TarListOptions t;
  t.label_from = "json:";
  EXPECT_FALSE(ValidateTarListOptions(t).ok());
  t.label_from = "txt";
  EXPECT_FALSE(ValidateTarListOptions(t).ok());
  const TempDir tmp;
  const std::string& dir = tmp.path();
  ASSERT_EQ(std::system(("tar -C '" + kPhotos + "' -cf '" + dir + "/a.tar' fruit").c_str()), 0);
  PackOptions o = PackInputOptions(dir + "/a.tar", dir + "/out.kiln");
  o.shuffle_seed = 1;
  Result<PackReport> r = Pack(o);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("--shuffle-seed"), std::string::npos);
}

// One flat shard written by Python's tarfile (KEY.jpg + KEY.cls for five photos) and the same
// members compressed with gzip (.tar.gz and .tgz), bzip2 and xz (tarfile) and zstd (the zstd
// tool): every one packs to the same records. A gzip shard cut short is a rejection naming the
// member and its byte offset, after the samples before it are packed.
TEST(TarSourceTest, CompressedShardsPackAsTheUncompressedOne) {
  const TempDir tmp;
  const std::string& dir = tmp.path();
  ASSERT_EQ(RunPython(dir, R"PY(
import io, os, tarfile
photos = ")PY" + kPhotos + R"PY("
dir = ")PY" + dir + R"PY("
names = ["animal/baboon.jpg", "fruit/apple.jpg", "scene/home.jpg", "letter_f/orientation_3.jpg",
         "fruit/orange.jpg"]
for suffix, mode in ((".tar", "w"), (".tar.gz", "w:gz"), (".tgz", "w:gz"), (".tar.bz2", "w:bz2"),
                     (".tar.xz", "w:xz")):
    with tarfile.open(os.path.join(dir, "shard" + suffix), mode, format=tarfile.PAX_FORMAT) as t:
        for i, n in enumerate(names):
            for name, data in ((f"k{i}.jpg", open(os.path.join(photos, n), "rb").read()),
                               (f"k{i}.cls", str(i).encode())):
                info = tarfile.TarInfo(name); info.size = len(data)
                t.addfile(info, io.BytesIO(data))
data = open(os.path.join(dir, "shard.tar.gz"), "rb").read()
open(os.path.join(dir, "cut.tar.gz"), "wb").write(data[: len(data) * 3 // 4])
)PY"),
            0);
  ASSERT_EQ(std::system(("zstd -q '" + dir + "/shard.tar' -o '" + dir + "/shard.tar.zst'").c_str()),
            0);
  const Packed plain = PackAndRead(PackInputOptions(dir + "/shard.tar", dir + "/plain.kiln"));
  ASSERT_EQ(plain.report.packed, 5u);
  const std::string plain_bytes = ShardBytes(dir + "/plain.kiln");
  for (const char* suffix : {".tar.gz", ".tgz", ".tar.bz2", ".tar.xz", ".tar.zst"}) {
    const std::string shard = dir + "/shard" + suffix;
    EXPECT_TRUE(IsTarInput(shard)) << suffix;
    const Packed p = PackAndRead(PackInputOptions(shard, dir + "/out" + suffix + ".kiln"));
    EXPECT_EQ(p.report.packed, 5u) << suffix;
    EXPECT_EQ(p.report.rejected, 0u) << suffix;
    EXPECT_EQ(p.labels, plain.labels) << suffix;
    EXPECT_TRUE(ShardBytes(dir + "/out" + suffix + ".kiln") == plain_bytes) << suffix;
  }
  Result<PackReport> cut = Pack(PackInputOptions(dir + "/cut.tar.gz", dir + "/cut.kiln"));
  ASSERT_TRUE(cut.ok()) << cut.status().ToString();
  EXPECT_GE(cut->packed, 1u);
  EXPECT_LT(cut->packed, 5u);
  EXPECT_EQ(cut->packed + cut->rejected, cut->listed);
  ASSERT_GE(cut->rejections.size(), 1u);
  const std::string& reason = cut->rejections.back().reason;
  EXPECT_NE(reason.find("byte offset"), std::string::npos) << reason;
  EXPECT_NE(reason.find("libarchive"), std::string::npos) << reason;
  EXPECT_NE(cut->rejections.back().path.find("cut.tar.gz"), std::string::npos);
}

// A ustar member whose name is not UTF-8 (bytes ff fe) is a rejection with the bytes escaped in
// its path and reason; a symbolic link member is skipped; a label member over 1 MiB is a
// rejection naming it and its exact byte offset (as Python's tarfile gives it); `kiln pack
// --json` prints the report of that shard as valid JSON.
TEST(TarSourceTest, NonUtf8KeysLinksAndOversizedLabelsAreAccountedFor) {
  const TempDir tmp;
  const std::string& dir = tmp.path();
  ASSERT_EQ(RunPython(dir, R"PY(
import io, os, tarfile
photo = open(os.path.join(")PY" +
                               kPhotos + R"PY(", "fruit/apple.jpg"), "rb").read()
path = os.path.join(")PY" + dir +
                               R"PY(", "odd.tar")
with tarfile.open(path, "w", format=tarfile.USTAR_FORMAT, encoding="utf-8",
                  errors="surrogateescape") as t:
    def add(name, data):
        info = tarfile.TarInfo(name); info.size = len(data); t.addfile(info, io.BytesIO(data))
    add("good.jpg", photo); add("good.cls", b"1")
    add("\udcff\udcfe.jpg", photo); add("\udcff\udcfe.cls", b"2")
    link = tarfile.TarInfo("good2.jpg"); link.type = tarfile.SYMTYPE; link.linkname = "good.jpg"
    t.addfile(link)
    add("big.jpg", photo); add("big.cls", b" " * (1 << 20) + b"3")
)PY"),
            0);
  const Packed p = PackAndRead(PackInputOptions(dir + "/odd.tar", dir + "/out.kiln"));
  const PackReport& r = p.report;
  EXPECT_EQ(r.packed, 1u);
  EXPECT_EQ(p.labels.at("good"), 1);
  EXPECT_EQ(r.rejected, 2u);
  EXPECT_EQ(r.listed, 3u);
  std::string reasons;
  for (const Rejection& x : r.rejections) reasons += x.path + ": " + x.reason + "\n";
  EXPECT_NE(reasons.find("odd.tar:\\xFF\\xFE: key is not valid UTF-8 ('\\xFF\\xFE')"),
            std::string::npos)
      << reasons;
  EXPECT_NE(reasons.find("big.cls at byte offset 159232 "), std::string::npos) << reasons;
  EXPECT_NE(reasons.find("over 1 MiB"), std::string::npos) << reasons;
  ASSERT_EQ(r.skipped_files.size(), 1u);
  EXPECT_NE(r.skipped_files[0].path.find("odd.tar:good2.jpg"), std::string::npos);
  EXPECT_EQ(r.skipped_files[0].reason, "not a regular file member");
  const std::string json = PackReportJson(r);
  EXPECT_NE(json.find("odd.tar:\\\\xFF\\\\xFE"), std::string::npos) << json;
  const std::string cmd = std::string(KILN_BINARY_DIR) + "/tools/kiln pack '" + dir +
                          "/odd.tar' '" + dir + "/cli.kiln' --size 32 --json 2>/dev/null | " +
                          "/usr/bin/python3 -c 'import json,sys; j=json.load(sys.stdin); " +
                          "sys.exit(0 if j[\"rejected\"] == 2 else 1)'";
  EXPECT_EQ(std::system(cmd.c_str()), 0);
}

// A member of 4.5 GiB (a sparse file: its data is never written nor read) between samples: the
// listing and the pack skip it by seeking, the sample after it packs, and a member cut short
// past 4 GiB is named with its exact 64-bit byte offset.
TEST(TarSourceTest, MembersPastFourGiBAreSkippedAndOffsetsStayExact) {
  const TempDir tmp;
  const std::string& dir = tmp.path();
  ASSERT_EQ(RunPython(dir, R"PY(
import os, tarfile
photos = ")PY" + kPhotos + R"PY("
dir = ")PY" + dir + R"PY("
def photo(p): return open(os.path.join(photos, p), "rb").read()
def header(name, size):
    info = tarfile.TarInfo(name); info.size = size
    return info.tobuf(format=tarfile.GNU_FORMAT)
pad = lambda n: (512 - n % 512) % 512
with open(os.path.join(dir, "huge.tar"), "wb") as f:
    def add(name, data):
        f.write(header(name, len(data))); f.write(data); f.write(b"\0" * pad(len(data)))
    add("a.jpg", photo("fruit/apple.jpg")); add("a.cls", b"0")
    huge = 9 << 29  # 4.5 GiB
    f.write(header("b.bin", huge)); f.seek(huge, os.SEEK_CUR)  # a hole: nothing written
    add("b.cls", b"1"); add("b.jpg", photo("animal/baboon.jpg"))
    add("c.cls", b"2")
    offset = f.tell()
    data = photo("scene/home.jpg")
    f.write(header("c.jpg", len(data))); f.write(data[: len(data) // 2])
open(os.path.join(dir, "offset.txt"), "w").write(str(offset))
)PY"),
            0);
  const uint64_t offset = std::stoull(testing::ReadFileString(dir + "/offset.txt"));
  ASSERT_GT(offset, uint64_t{1} << 32);
  const Packed p = PackAndRead(PackInputOptions(dir + "/huge.tar", dir + "/out.kiln"));
  const PackReport& r = p.report;
  EXPECT_EQ(r.packed, 2u);
  EXPECT_EQ(p.labels.at("a"), 0);
  EXPECT_EQ(p.labels.at("b"), 1);
  ASSERT_EQ(r.rejections.size(), 1u);
  EXPECT_NE(r.rejections[0].reason.find("c.jpg at byte offset " + std::to_string(offset)),
            std::string::npos)
      << r.rejections[0].reason;
  ASSERT_EQ(r.skipped_files.size(), 1u);
  EXPECT_NE(r.skipped_files[0].path.find("huge.tar:b.bin"), std::string::npos);
}

// An input path that is not UTF-8 (a directory named d\xff): a tar shard and an ImageFolder
// under it pack, and the manifest names the input with the byte escaped.
TEST(TarSourceTest, InputPathsThatAreNotUtf8AreEscapedInTheManifest) {
  const TempDir tmp;
  const std::string dir = tmp / "d\xff";
  fs::create_directories(dir + "/folder/fruit");
  ASSERT_EQ(std::system(("tar -C '" + kPhotos + "' -cf '" + dir + "/a.tar' fruit").c_str()), 0);
  for (const auto& e : fs::directory_iterator(kPhotos + "/fruit")) {
    fs::copy_file(e.path(), dir + "/folder/fruit/" + e.path().filename().string());
  }
  PackOptions tar = PackInputOptions(dir + "/a.tar", tmp / "tar.kiln");
  tar.tar.label_from = "class-folder";
  const Packed t = PackAndRead(tar);
  EXPECT_EQ(t.report.packed, 3u);
  const std::string escaped = "/d\\\\xFF";  // JSON escapes the backslash
  EXPECT_NE(t.report.manifest.source_json.find(escaped + "/a.tar\""), std::string::npos)
      << t.report.manifest.source_json;
  const Packed f = PackAndRead(PackInputOptions(dir + "/folder", tmp / "folder.kiln"));
  EXPECT_EQ(f.report.packed, 3u);
  EXPECT_NE(f.report.manifest.source_json.find(escaped + "/folder\""), std::string::npos)
      << f.report.manifest.source_json;
}

// Five flat WebDataset shards 000000.tar .. 000004.tar (KEY.jpg + KEY.cls) made by the system tar
// from samples/photos, dealt round-robin. Shard 0 also holds a sample whose image does not decode
// (a rejection while packing), shard 3 a label without an image (a rejection while listing) and a
// caption member (skipped): a whole pack rejects the listing problem first.
std::string MakeFiveShards(const std::string& dir) {
  std::vector<fs::path> photos;
  for (const auto& c : fs::directory_iterator(kPhotos)) {
    if (!c.is_directory()) continue;
    for (const auto& e : fs::directory_iterator(c.path())) photos.push_back(e.path());
  }
  std::sort(photos.begin(), photos.end());
  std::vector<std::string> stages;
  for (int s = 0; s < 5; ++s) {
    stages.push_back(dir + "/stage" + std::to_string(s));
    fs::create_directories(stages.back());
  }
  for (size_t i = 0; i < photos.size(); ++i) {
    char key[32];
    std::snprintf(key, sizeof(key), "s%03zu", i);
    const std::string stage = stages[i % 5];
    fs::copy_file(photos[i], stage + "/" + key + ".jpg");
    testing::WriteFileString(stage + "/" + key + ".cls", std::to_string(i % 7) + "\n");
  }
  testing::WriteFileString(stages[0] + "/zbroken.jpg", "not a JPEG at all");
  testing::WriteFileString(stages[0] + "/zbroken.cls", "2");
  testing::WriteFileString(stages[3] + "/orphan.cls", "1");
  testing::WriteFileString(stages[3] + "/s003.txt", "a caption");
  fs::create_directories(dir + "/shards");
  for (int s = 0; s < 5; ++s) {
    const std::string shard = dir + "/shards/00000" + std::to_string(s) + ".tar";
    EXPECT_EQ(std::system(("cd '" + stages[s] + "' && tar -cf '" + shard + "' *").c_str()), 0);
  }
  return dir + "/shards/{000000..000004}.tar";
}

PackOptions SplitOptions(const std::string& input, const std::string& output) {
  PackOptions o = PackInputOptions(input, output);
  o.shard_size_bytes = 20000;  // about three samples per data file: several per part
  return o;
}

// Every regular file under `dir` (relative name -> bytes).
std::map<std::string, std::string> Files(const std::string& dir) {
  std::map<std::string, std::string> files;
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    if (e.is_regular_file())
      files[fs::relative(e.path(), dir).string()] = testing::ReadFileString(e.path());
  }
  return files;
}

// Packs parts 0..N-1 of `input` into `output`.parts one by one (as N nodes would); returns the
// parts' records.
std::vector<PartitionRecord> PackParts(const std::string& input, const std::string& output,
                                       uint32_t n) {
  std::vector<PartitionRecord> records;
  for (uint32_t i = 0; i < n; ++i) {
    PackOptions o = SplitOptions(input, output);
    o.part_index = i;
    o.part_count = n;
    Result<PackReport> r = Pack(o);
    EXPECT_TRUE(r.ok()) << "part " << i << ": " << r.status().ToString();
    if (!r.ok() || !r->partition) return records;
    records.push_back(*r->partition);
  }
  return records;
}

Status Merge(const std::string& parts, const std::string& output, bool reshard = false) {
  MergeOptions m;
  m.inputs = {parts};
  m.output = output;
  m.reshard = reshard;
  return MergeParts(m).status();
}

// Tar input is split by shard file: part I of 3 takes shards PartRange(5, I, 3) ([0,1), [1,3),
// [3,5)), and the merged parts equal one `kiln pack --of 3` byte for byte (shards, kiln.json,
// rejected.tsv with the listing problem of part 2 before the decode rejection of part 0,
// skipped.tsv); merged with --reshard they equal a plain pack byte for byte.
TEST(TarPartitionTest, PartsSplitByShardFileMergeToTheWholePackByteForByte) {
  const TempDir tmp;
  const std::string& dir = tmp.path();
  const std::string pattern = MakeFiveShards(dir);
  PackOptions whole = SplitOptions(pattern, dir + "/whole.kiln");
  whole.part_count = 3;
  Result<PackReport> w = Pack(whole);
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  EXPECT_EQ(w->packed, 23u);
  EXPECT_EQ(w->rejected, 2u);
  EXPECT_EQ(w->skipped, 1u);

  const std::vector<PartitionRecord> records = PackParts(pattern, dir + "/job.kiln", 3);
  ASSERT_EQ(records.size(), 3u);
  const std::vector<ItemRange> shards = {{0, 1}, {1, 3}, {3, 5}};
  for (uint32_t i = 0; i < 3; ++i) {
    EXPECT_TRUE(records[i].split_by_shards);
    EXPECT_EQ(records[i].shards, shards[i]) << i;
    EXPECT_EQ(records[i].listed_shards, 5u);
    EXPECT_EQ(records[i].shard_list_xxh3_64, records[0].shard_list_xxh3_64);
  }
  EXPECT_EQ(records[0].listed_items, 6u);      // 5 photos and zbroken, listed; zbroken fails later
  EXPECT_EQ(records[2].listing_problems, 1u);  // orphan.cls in shard 3
  ASSERT_TRUE(Merge(dir + "/job.kiln.parts", dir + "/job.kiln").ok());
  const auto merged = Files(dir + "/job.kiln");
  const auto expected = Files(dir + "/whole.kiln");
  ASSERT_GT(expected.size(), 5u);
  EXPECT_EQ(merged.size(), expected.size());
  for (const auto& [name, bytes] : expected) {
    ASSERT_EQ(merged.count(name), 1u) << name;
    EXPECT_TRUE(merged.at(name) == bytes) << name << " differs";
  }
  const std::string rejected = merged.at("rejected.tsv");
  EXPECT_LT(rejected.find("orphan"), rejected.find("zbroken")) << rejected;

  PackOptions plain = SplitOptions(pattern, dir + "/plain.kiln");
  ASSERT_TRUE(Pack(plain).ok());
  ASSERT_EQ(PackParts(pattern, dir + "/copied.kiln", 3).size(), 3u);
  ASSERT_TRUE(Merge(dir + "/copied.kiln.parts", dir + "/copied.kiln", /*reshard=*/true).ok());
  EXPECT_EQ(Files(dir + "/copied.kiln"), Files(dir + "/plain.kiln"));
}

// A part opens only its own shards: with shard 0 deleted and shard 4 overwritten with garbage,
// part 1 of 3 (shards 1 and 2) packs as before; part 0 is refused naming its missing shard.
// With more parts than shards, the parts without a shard pack 0 samples and the merge of all 8
// equals `kiln pack --of 8`.
TEST(TarPartitionTest, APartReadsOnlyItsOwnShards) {
  const TempDir tmp;
  const std::string& dir = tmp.path();
  const std::string pattern = MakeFiveShards(dir);
  const std::vector<PartitionRecord> before = PackParts(pattern, dir + "/before.kiln", 3);
  ASSERT_EQ(before.size(), 3u);
  const auto part1 = Files(dir + "/before.kiln.parts/" + PartDirectoryName(1, 3));

  PackOptions whole = SplitOptions(pattern, dir + "/whole8.kiln");
  whole.part_count = 8;
  ASSERT_TRUE(Pack(whole).ok());
  ASSERT_EQ(PackParts(pattern, dir + "/job8.kiln", 8).size(), 8u);
  for (uint32_t i : {0u, 2u, 5u}) {  // PartRange(5, i, 8) is empty
    auto ds = Dataset::Open(dir + "/job8.kiln.parts/" + PartDirectoryName(i, 8));
    ASSERT_TRUE(ds.ok()) << i;
    EXPECT_EQ((*ds)->num_samples(), 0u) << i;
  }
  ASSERT_TRUE(Merge(dir + "/job8.kiln.parts", dir + "/job8.kiln").ok());
  EXPECT_EQ(Files(dir + "/job8.kiln"), Files(dir + "/whole8.kiln"));

  fs::remove(dir + "/shards/000000.tar");
  testing::WriteFileString(dir + "/shards/000004.tar", std::string(4096, '\x5a'));
  PackOptions o = SplitOptions(pattern, dir + "/after.kiln");
  o.part_index = 1;
  o.part_count = 3;
  Result<PackReport> r = Pack(o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(Files(dir + "/after.kiln.parts/" + PartDirectoryName(1, 3)), part1);
  o.part_index = 0;
  r = Pack(o);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kNotFound);
  EXPECT_NE(r.status().message().find("000000.tar"), std::string::npos) << r.status().ToString();
  // A whole pack needs every shard.
  EXPECT_FALSE(Pack(SplitOptions(pattern, dir + "/whole_after.kiln")).ok());
}

// The merge refuses a missing part, and a part packed from another shard list (here a sixth
// shard added before part 1 was packed), naming the part and the reason; and --label-from
// class-folder with --part, which no part could number alone, is refused.
TEST(TarPartitionTest, MergeRefusesAMissingPartAndAnotherShardList) {
  const TempDir tmp;
  const std::string& dir = tmp.path();
  const std::string pattern = MakeFiveShards(dir);
  ASSERT_EQ(PackParts(pattern, dir + "/job.kiln", 3).size(), 3u);
  const std::string parts = dir + "/job.kiln.parts";
  const std::string held = dir + "/held";
  fs::rename(parts + "/" + PartDirectoryName(1, 3), held);
  Status s = Merge(parts, dir + "/job.kiln");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("part 1 of 3 is missing"), std::string::npos) << s.ToString();

  // Part 1 again, from a directory of six shards (the five and a copy).
  fs::copy_file(dir + "/shards/000002.tar", dir + "/shards/000005.tar");
  PackOptions o = SplitOptions(dir + "/shards", dir + "/job.kiln");
  o.part_index = 1;
  o.part_count = 3;
  Result<PackReport> r = Pack(o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->partition->shards, (ItemRange{2, 4}));
  s = Merge(parts, dir + "/job.kiln");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("part 1 of 3 was packed from another shard list than part 0 of 3"),
            std::string::npos)
      << s.ToString();
  EXPECT_NE(s.message().find("6 shards"), std::string::npos) << s.ToString();
  EXPECT_FALSE(fs::exists(dir + "/job.kiln"));
  // The right part 1 back: the merge goes through.
  fs::remove_all(parts + "/" + PartDirectoryName(1, 3));
  fs::rename(held, parts + "/" + PartDirectoryName(1, 3));
  EXPECT_TRUE(Merge(parts, dir + "/job.kiln").ok());

  o = SplitOptions(pattern, dir + "/folders.kiln");
  o.tar.label_from = "class-folder";
  o.part_index = 0;
  o.part_count = 2;
  r = Pack(o);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("--class-map"), std::string::npos) << r.status().ToString();
}

}  // namespace
}  // namespace kiln
