// Real-world archive inputs (tools/sources/pack_inputs.md): WebDataset shards written by GNU tar
// and Python's tarfile with members that are not samples (macOS "._NAME" and "__MACOSX/" files,
// .DS_Store, names without a key or an extension, directory entries, symbolic and hard links, pax
// and GNU long-name headers) pack exactly the samples that Python's tarfile and WebDataset's
// grouping rule give (tests/tools/webdataset_reference.py); gzip inputs are read to the end of
// their last gzip member, and a cut trailer or bytes after the stream are a rejection naming the
// file; a plain pack, `kiln pack --of N` and `--part I --of N` + `kiln merge` give the same
// bytes or a refusal for every input kind, with file names and keys that repeat in different
// folders or shards.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tests/test_util.h"
#include "tests/tools/pack_and_read.h"
#include "tests/tools/tfrecord_writer.h"
#include "tools/pack/packer.h"
#include "tools/pack/part_merger.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;
using testing::PackAndRead;
using testing::Packed;
using testing::PackInputOptions;

const std::string kPhotos = std::string(KILN_SOURCE_DIR) + "/samples/photos";
const std::string kReference =
    std::string(KILN_SOURCE_DIR) + "/tests/tools/webdataset_reference.py";

int RunPython(const std::string& script_dir, const std::string& program) {
  const std::string script = script_dir + "/make.py";
  testing::WriteFileString(script, program);
  return std::system(("/usr/bin/python3 '" + script + "'").c_str());
}

std::string Reasons(const PackReport& r) {
  std::string out;
  for (const Rejection& x : r.rejections) out += x.path + ": " + x.reason + "\n";
  return out;
}

// The shards of B51: a GNU tar shard (--format=gnu, members in a given order, a long name), a
// Python tarfile PAX shard, and a tarfile shard compressed as two gzip members.
void MakeOddShards(const std::string& dir) {
  const std::string src = dir + "/src", shards = dir + "/shards";
  fs::create_directories(shards);
  ASSERT_EQ(RunPython(dir, R"PY(
import gzip, io, os, tarfile
photos = ")PY" + kPhotos + R"PY("
src = ")PY" + src + R"PY("
shards = ")PY" + shards + R"PY("
def photo(p):
    return open(os.path.join(photos, p), "rb").read()
long = "d" * 60 + "/" + "e" * 60
files = [("a.jpg", photo("animal/baboon.jpg")), ("._a.jpg", b"\0\5\26\7 AppleDouble"), ("a.cls", b"1"),
         ("B.JPG", photo("fruit/apple.jpg")), (".DS_Store", b"\0\0\0\1Bud1"), ("B.CLS", b"2"),
         ("c.jpg", photo("scene/home.jpg")), ("__MACOSX/", None), ("__MACOSX/._c.jpg", b"meta"),
         ("c.cls", b"3"),
         ("d.jpg", photo("fruit/orange.jpg")), ("README", b"read me"), ("d.cls", b"4"),
         (long + "/x.jpg", photo("animal/butterfly.jpg")), (long + "/x.cls", b"5"),
         ("f.v1.jpg", photo("scene/building.jpg")), ("f.v1.cls", b"6"),
         ("g.tar.d/", None), ("g.tar.d/h.jpg", photo("letter_f/orientation_1.jpg")),
         ("g.tar.d/h.cls", b"7"),
         ("i.jpg", photo("letter_f/orientation_2.jpg")), ("i/", None), ("i/README", b"x"),
         ("i.cls", b"8")]
os.makedirs(src)
with open(os.path.join(src, "order.txt"), "w") as order:
    for name, data in files:
        if data is None:
            os.makedirs(os.path.join(src, name), exist_ok=True)
        else:
            os.makedirs(os.path.dirname(os.path.join(src, name)), exist_ok=True)
            open(os.path.join(src, name), "wb").write(data)
        print(name.rstrip("/"), file=order)
def add(t, name, data, kind=tarfile.REGTYPE):
    info = tarfile.TarInfo(name)
    info.type = kind
    if kind in (tarfile.SYMTYPE, tarfile.LNKTYPE):
        info.linkname = "p.jpg"
    else:
        info.size = len(data)
    t.addfile(info, io.BytesIO(data) if kind == tarfile.REGTYPE else None)
with tarfile.open(os.path.join(shards, "py.tar"), "w", format=tarfile.PAX_FORMAT) as t:
    add(t, "p.jpg", photo("scene/stuff.jpg")); add(t, "p.seg.png", b"mask"); add(t, "p.cls", b"9")
    add(t, "q/r.JPEG", photo("scene/aero1.jpg")); add(t, "q/._r.JPEG", b"meta"); add(t, "q/r.Cls", b"10")
    add(t, "\u00fc" * 70 + "/s.jpg", photo("scene/left01.jpg")); add(t, "\u00fc" * 70 + "/s.cls", b"11")
    add(t, "t.jpg", photo("animal/HappyFish.jpg")); add(t, "t.txt", b"", tarfile.SYMTYPE)
    add(t, "t2.jpg", b"", tarfile.LNKTYPE); add(t, "t.cls", b"12")
    add(t, "u.jpg", photo("fruit/fruits.jpg")); add(t, "u.cls", b" 13\n"); add(t, "__MACOSX/._u.jpg", b"meta")
    add(t, "noimage.cls", b"14")
buf = io.BytesIO()
with tarfile.open(fileobj=buf, mode="w", format=tarfile.GNU_FORMAT) as t:
    for i, p in enumerate(["letter_f/orientation_3.jpg", "letter_f/orientation_4.jpg", "letter_f/orientation_5.jpg"]):
        add(t, f"z{i}.jpg", photo(p)); add(t, f"z{i}.cls", str(20 + i).encode())
data = buf.getvalue()
cut = len(data) // 2 // 512 * 512
open(os.path.join(shards, "two-members.tar.gz"), "wb").write(gzip.compress(data[:cut]) + gzip.compress(data[cut:]))
)PY"),
            0);
  ASSERT_EQ(std::system(("tar -C '" + src + "' --format=gnu --no-recursion -T '" + src +
                         "/order.txt' -cf '" + shards + "/gnu.tar'")
                            .c_str()),
            0);
}

// B51: tar member names with several dots and upper-case extensions, among members that are not
// samples: kiln packs exactly the samples that Python's tarfile and WebDataset's grouping rule
// give (keys up to the first dot of the basename, extensions case-insensitive), in order, with
// their labels; every other sample is one rejection naming its key, and every member tarfile
// reads is packed, rejected or skipped.
TEST(ArchiveInputsTest, B51_TarSamplesAreExactlyWhatTarfileAndWebDatasetGroupingGive) {
  const TempDir tmp;
  const std::string& dir = tmp.path();
  MakeOddShards(dir);
  if (::testing::Test::HasFatalFailure()) return;
  const std::vector<std::string> shards = {dir + "/shards/gnu.tar", dir + "/shards/py.tar",
                                           dir + "/shards/two-members.tar.gz"};
  std::string command = "/usr/bin/python3 '" + kReference + "' '" + dir + "/expected.json'";
  for (const std::string& s : shards) command += " '" + s + "'";
  ASSERT_EQ(std::system(command.c_str()), 0);
  const nlohmann::json expected =
      nlohmann::json::parse(testing::ReadFileString(dir + "/expected.json"));
  std::vector<std::string> packable, unpackable;
  std::map<std::string, int64_t> labels;
  for (const nlohmann::json& s : expected["samples"]) {
    const std::string key = s["key"];
    if (s["images"] == 1 && !s["label"].is_null()) {
      packable.push_back(key);
      labels[key] = s["label"];
    } else {
      unpackable.push_back(key);
    }
  }
  ASSERT_EQ(packable.size(), 15u);  // a B c d x h i, p r s t u, z0 z1 z2 (not f, noimage)
  ASSERT_EQ(unpackable, (std::vector<std::string>{"f", "noimage"}));

  const Packed p = PackAndRead(PackInputOptions(dir + "/shards", dir + "/out.kiln"));
  const PackReport& r = p.report;
  EXPECT_EQ(p.keys, packable) << Reasons(r);
  EXPECT_EQ(p.labels, labels);
  EXPECT_EQ(r.rejected, unpackable.size()) << Reasons(r);
  EXPECT_EQ(r.listed, packable.size() + unpackable.size());
  EXPECT_EQ(r.skipped, expected["members"].get<uint64_t>() - expected["used"].get<uint64_t>());
  const std::string reasons = Reasons(r);
  EXPECT_NE(reasons.find("gnu.tar:f: sample f has no image member"), std::string::npos) << reasons;
  EXPECT_NE(reasons.find("py.tar:noimage: sample noimage has no image member"), std::string::npos)
      << reasons;
  std::string skipped;
  for (const SkippedFile& f : r.skipped_files) skipped += f.path + "\t" + f.reason + "\n";
  EXPECT_NE(skipped.find("gnu.tar:._a.jpg\tmacOS AppleDouble"), std::string::npos) << skipped;
  EXPECT_NE(skipped.find("gnu.tar:__MACOSX/._c.jpg\tmacOS AppleDouble"), std::string::npos)
      << skipped;
  EXPECT_NE(skipped.find("py.tar:__MACOSX/._u.jpg\t"), std::string::npos) << skipped;
  EXPECT_NE(skipped.find("gnu.tar:.DS_Store\tno KEY.EXTENSION name"), std::string::npos) << skipped;
  EXPECT_NE(skipped.find("gnu.tar:README\tno KEY.EXTENSION name"), std::string::npos) << skipped;
  EXPECT_TRUE(r.warnings.empty()) << r.warnings.front();
}

// A tar.gz shard is read to the end of its gzip stream: bytes after the stream, or a second
// tar.gz appended (whose members a tar reader never reaches) are each one rejection naming the
// shard, its own samples packed; a cut gzip trailer is a rejection too (libarchive names the
// member it could not finish).
TEST(ArchiveInputsTest, GzipShardsAreCheckedToTheEndOfTheStream) {
  const TempDir tmp;
  const std::string& dir = tmp.path();
  fs::create_directories(dir + "/shards");
  ASSERT_EQ(RunPython(dir, R"PY(
import gzip, io, os, tarfile
photos = ")PY" + kPhotos + R"PY("
shards = ")PY" + dir + R"PY(/shards"
def tar(prefix):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as t:
        for i, p in enumerate(["animal/baboon.jpg", "fruit/apple.jpg"]):
            for name, data in ((f"{prefix}{i}.jpg", open(os.path.join(photos, p), "rb").read()),
                               (f"{prefix}{i}.cls", str(i).encode())):
                info = tarfile.TarInfo(name); info.size = len(data); t.addfile(info, io.BytesIO(data))
    return buf.getvalue()
open(os.path.join(shards, "a-trailer.tar.gz"), "wb").write(gzip.compress(tar("a"))[:-3])
open(os.path.join(shards, "b-junk.tar.gz"), "wb").write(gzip.compress(tar("b")) + b"junk after\n")
open(os.path.join(shards, "c-two-tars.tar.gz"), "wb").write(gzip.compress(tar("c")) + gzip.compress(tar("x")))
open(os.path.join(shards, "d-whole.tar.gz"), "wb").write(gzip.compress(tar("d")))
)PY"),
            0);
  Result<PackReport> r = Pack(PackInputOptions(dir + "/shards", dir + "/out.kiln"));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->packed, 7u) << Reasons(*r);  // a0 b0 b1 c0 c1 d0 d1; x0 x1 are not read
  ASSERT_EQ(r->rejections.size(), 3u) << Reasons(*r);
  EXPECT_EQ(r->listed, 10u);
  const auto& x = r->rejections;
  EXPECT_EQ(x[0].path, dir + "/shards/a-trailer.tar.gz:a1");
  EXPECT_NE(x[0].reason.find("truncated or damaged tar member a1.jpg"), std::string::npos)
      << x[0].reason;
  EXPECT_EQ(x[1].path, dir + "/shards/b-junk.tar.gz");
  EXPECT_NE(x[1].reason.find("11 bytes after the end of the gzip stream (1 members), from byte "
                             "offset "),
            std::string::npos)
      << x[1].reason;
  EXPECT_EQ(x[2].path, dir + "/shards/c-two-tars.tar.gz");
  EXPECT_NE(x[2].reason.find("data after the end-of-archive marker"), std::string::npos)
      << x[2].reason;
}

nlohmann::json PhotoRecord(const std::string& relative, int64_t label) {
  nlohmann::json features;
  features["image/encoded"] = {{"bytes_files", {kPhotos + "/" + relative}}};
  features["image/class/label"] = {{"int64", {label}}};
  features["image/filename"] = {{"bytes", {relative}}};
  return {{"features", features}};
}

// B54: TFRecord inputs as they come: a gzip file of two gzip members (cut inside a record) is
// read whole; a ZLIB file is refused with a hint; a file cut inside a record is one rejection
// naming the file, the record and its byte offset; an image feature of the wrong kind is a
// rejection naming the feature; a gzip file whose trailer is cut or that has bytes after its
// stream is a rejection naming the file, its records packed.
TEST(ArchiveInputsTest, B54_TFRecordGzipZlibCutRecordsAndFeatureKinds) {
  const TempDir tmp;
  const std::string& dir = tmp.path();
  fs::create_directories(dir + "/tf");
  const std::vector<nlohmann::json> three = {PhotoRecord("animal/baboon.jpg", 0),
                                             PhotoRecord("fruit/apple.jpg", 1),
                                             PhotoRecord("scene/home.jpg", 3)};
  nlohmann::json wrong_kind = PhotoRecord("fruit/orange.jpg", 1);
  wrong_kind["features"]["image/encoded"] = {{"int64", {7}}};
  const nlohmann::json w = testing::RunTFRecordWriter(
      dir, {{{"path", dir + "/raw.tfrecord"}, {"gzip", false}, {"records", three}},
            {{"path", dir + "/tf/kinds.tfrecord"},
             {"gzip", false},
             {"records", {PhotoRecord("fruit/apple.jpg", 1), wrong_kind}}}});
  const uint64_t last = w["files"][0]["offsets"][2].get<uint64_t>();
  ASSERT_EQ(RunPython(dir, R"PY(
import gzip, zlib
dir = ")PY" + dir + R"PY("
data = open(dir + "/raw.tfrecord", "rb").read()
half = len(data) // 2  # inside record 1
open(dir + "/tf/two-members.tfrecord.gz", "wb").write(gzip.compress(data[:half]) + gzip.compress(data[half:]))
open(dir + "/tf/zlib.tfrecord", "wb").write(zlib.compress(data))
open(dir + "/tf/cut.tfrecord", "wb").write(data[:-10])
open(dir + "/tf/trailer.tfrecord.gz", "wb").write(gzip.compress(data)[:-3])
open(dir + "/tf/junk.tfrecord.gz", "wb").write(gzip.compress(data) + b"junk")
)PY"),
            0);
  Result<PackReport> r = Pack(PackInputOptions(dir + "/tf", dir + "/out.kiln"));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  // Files in name order: cut, junk, kinds, trailer, two-members, zlib.
  std::map<std::string, std::string> reason;  // file name -> its rejections
  for (const Rejection& x : r->rejections) {
    reason[fs::path(x.path).filename().string()] += x.reason + "\n";
  }
  EXPECT_EQ(r->packed, 2u + 3u + 1u + 3u + 3u) << Reasons(*r);
  EXPECT_EQ(r->rejections.size(), 5u) << Reasons(*r);
  EXPECT_EQ(reason["two-members.tfrecord.gz"], "");
  EXPECT_NE(reason["zlib.tfrecord"].find("compression ZLIB is not read"), std::string::npos)
      << reason["zlib.tfrecord"];
  EXPECT_EQ(reason["cut.tfrecord"].rfind(
                "record 2 at byte offset " + std::to_string(last) + ": truncated", 0),
            0u)
      << reason["cut.tfrecord"];
  EXPECT_NE(reason["kinds.tfrecord"].find("record 1 at byte offset"), std::string::npos);
  EXPECT_NE(reason["kinds.tfrecord"].find("feature image/encoded is"), std::string::npos)
      << reason["kinds.tfrecord"];
  EXPECT_NE(reason["trailer.tfrecord.gz"].find("gzip"), std::string::npos)
      << reason["trailer.tfrecord.gz"];
  EXPECT_EQ(reason["junk.tfrecord.gz"],
            "after its 3 records: 4 bytes after the end of the gzip stream (1 members), from byte "
            "offset " +
                std::to_string(fs::file_size(dir + "/tf/junk.tfrecord.gz") - 4) +
                ", are not gzip data: a gzip reader stops there, so they are not read\n");
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

PackOptions SmallShards(const std::string& input, const std::string& output) {
  PackOptions o = PackInputOptions(input, output);
  o.shard_size_bytes = 20000;  // about three samples per data file
  return o;
}

// Packs `input` as `kiln pack --of n` into OUT/whole, as parts 0..n-1 merged into OUT/job, and
// plainly into OUT/plain and as parts merged with --reshard into OUT/copied. Returns the first
// merge's status (and its report's warnings); when it succeeds, expects job == whole and
// copied == plain, file by file.
Status ExpectPartsEqualTheWholePack(const std::string& input, const std::string& out, uint32_t n,
                                    std::vector<std::string>* warnings = nullptr) {
  fs::create_directories(out);
  PackOptions whole = SmallShards(input, out + "/whole");
  whole.part_count = n;
  Result<PackReport> w = Pack(whole);
  EXPECT_TRUE(w.ok()) << w.status().ToString();
  Result<PackReport> plain = Pack(SmallShards(input, out + "/plain"));
  EXPECT_TRUE(plain.ok()) << plain.status().ToString();
  Status merged = Status::Ok();
  for (const char* job : {"job", "copied"}) {
    for (uint32_t i = 0; i < n; ++i) {
      PackOptions o = SmallShards(input, out + "/" + job);
      o.part_index = i;
      o.part_count = n;
      Result<PackReport> r = Pack(o);
      EXPECT_TRUE(r.ok()) << input << " part " << i << ": " << r.status().ToString();
    }
    MergeOptions m;
    m.inputs = {out + "/" + job + ".parts"};
    m.output = out + "/" + job;
    m.reshard = std::string(job) == "copied";
    Result<MergeReport> report = MergeParts(m);
    if (!report.ok()) {
      merged = report.status();
      continue;
    }
    if (warnings != nullptr && !m.reshard) *warnings = report->warnings;
    const std::string expected = out + (m.reshard ? "/plain" : "/whole");
    EXPECT_EQ(Files(m.output), Files(expected))
        << input << ": " << m.output << " differs from " << expected;
  }
  return merged;
}

// A plain pack, `kiln pack --of 2` and `--part I --of 2` + `kiln merge` give the same bytes for
// an ImageFolder and a list file whose file names repeat in different folders (and a list file
// that lists one file twice), and for WebDataset shards of one name in two folders whose keys
// repeat: one pack packs every sample of a repeated key with a warning, and so does the merge,
// with a warning naming the key and both parts.
TEST(ArchiveInputsTest, PartsEqualTheWholePackWithRepeatedNamesAndKeys) {
  const TempDir tmp;
  const std::string dir = tmp.path() + "/in";
  const std::string out = tmp.path() + "/out";  // outside the list file's root
  const std::vector<std::string> photos = {"animal/baboon.jpg", "fruit/apple.jpg", "scene/home.jpg",
                                           "letter_f/orientation_1.jpg"};
  std::string list;
  for (size_t i = 0; i < photos.size(); ++i) {
    for (const char* c : {"a", "b"}) {
      fs::create_directories(dir + "/folder/" + c);
      fs::copy_file(kPhotos + "/" + photos[i],
                    dir + "/folder/" + c + "/" + std::to_string(i) + ".jpg");
      list +=
          std::string("folder/") + c + "/" + std::to_string(i) + ".jpg " + std::to_string(i) + "\n";
    }
  }
  list += "folder/a/0.jpg 0\n";  // the same file twice
  testing::WriteFileString(dir + "/list.txt", list);
  EXPECT_TRUE(ExpectPartsEqualTheWholePack(dir + "/folder", out + "/f", 2).ok());
  EXPECT_TRUE(ExpectPartsEqualTheWholePack(dir + "/list.txt", out + "/l", 2).ok());

  ASSERT_EQ(RunPython(dir, R"PY(
import io, os, tarfile
photos = ")PY" + kPhotos + R"PY("
for shard, names in (("a", ["animal/baboon.jpg", "fruit/apple.jpg"]), ("b", ["scene/home.jpg", "fruit/orange.jpg"])):
    os.makedirs(")PY" + dir + R"PY(/shards/" + shard)
    with tarfile.open(")PY" + dir +
                               R"PY(/shards/" + shard + "/000000.tar", "w") as t:
        for i, p in enumerate(names):
            for name, data in ((f"{i:06d}.jpg", open(os.path.join(photos, p), "rb").read()), (f"{i:06d}.cls", b"1")):
                info = tarfile.TarInfo(name); info.size = len(data); t.addfile(info, io.BytesIO(data))
)PY"),
            0);
  const std::string pattern = dir + "/shards/*/000000.tar";
  Result<PackReport> plain = Pack(SmallShards(pattern, dir + "/tar-plain"));
  ASSERT_TRUE(plain.ok()) << plain.status().ToString();
  EXPECT_EQ(plain->packed, 4u);
  ASSERT_FALSE(plain->warnings.empty());
  EXPECT_NE(plain->warnings[0].find("key 000000 names more than one sample"), std::string::npos)
      << plain->warnings[0];
  std::vector<std::string> warnings;
  const Status merged = ExpectPartsEqualTheWholePack(pattern, dir + "/t", 2, &warnings);
  EXPECT_TRUE(merged.ok()) << merged.ToString();
  ASSERT_EQ(warnings.size(), 2u);
  EXPECT_EQ(warnings[0].rfind("key 000000 is a sample of part 0 of 2 and of part 1 of 2", 0), 0u)
      << warnings[0];
}

// TFRecord files of one name in two folders: one pack (and `--of 2`) rejects the second file's
// records, whose default keys FILE_BASENAME:INDEX repeat; parts packed apart cannot see that, so
// the merge is refused naming the key and both parts, rather than packing what one pack rejects.
// With --feature-key and repeated keys, the same.
TEST(ArchiveInputsTest, MergeRefusesTFRecordKeysThatOnePackRejects) {
  const TempDir tmp;
  const std::string& dir = tmp.path();
  for (const char* d : {"/x", "/y"}) fs::create_directories(dir + d);
  testing::RunTFRecordWriter(
      dir,
      {{{"path", dir + "/x/train.tfrecord"},
        {"gzip", false},
        {"records", {PhotoRecord("animal/baboon.jpg", 0), PhotoRecord("fruit/apple.jpg", 1)}}},
       {{"path", dir + "/y/train.tfrecord"},
        {"gzip", false},
        {"records", {PhotoRecord("scene/home.jpg", 2), PhotoRecord("animal/baboon.jpg", 0)}}}});
  const std::string pattern = dir + "/*/train.tfrecord";
  Result<PackReport> plain = Pack(SmallShards(pattern, dir + "/plain"));
  ASSERT_TRUE(plain.ok()) << plain.status().ToString();
  EXPECT_EQ(plain->packed, 2u);
  EXPECT_EQ(plain->rejected, 2u);
  EXPECT_NE(Reasons(*plain).find("key train.tfrecord:0 is already the key of record 0"),
            std::string::npos)
      << Reasons(*plain);
  const Status merged = ExpectPartsEqualTheWholePack(pattern, dir + "/t", 2);
  ASSERT_FALSE(merged.ok());
  EXPECT_NE(merged.message().find("key train.tfrecord:0 is a sample of part 0 of 2 and of part 1 "
                                  "of 2: one pack of the whole input rejects the later record"),
            std::string::npos)
      << merged.ToString();
}

}  // namespace
}  // namespace kiln
