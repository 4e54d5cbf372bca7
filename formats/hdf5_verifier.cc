#include "formats/hdf5_verifier.h"

#include <sys/stat.h>
#include <xxhash.h>

#include <cerrno>
#include <memory>
#include <vector>

#include "formats/hdf5_file.h"
#include "formats/hdf5_format.h"
#include "formats/mapped_file.h"
#include "formats/record_codec.h"

namespace kiln {

namespace {

uint64_t LoadLE64At(const uint8_t* p) {
  uint64_t v = 0;
  for (int b = 7; b >= 0; --b) v = (v << 8) | p[b];
  return v;
}

}  // namespace

void VerifyHdf5Dataset(const std::string& dir, const Manifest& manifest,
                       const VerifyOptions& options, VerifyReport* report) {
  const std::string path = dir + "/" + kHdf5DataFileName;
  auto problem = [&](const std::string& file, int64_t record, int64_t offset, std::string why) {
    report->problems.push_back({file, record, offset, std::move(why)});
  };
  const std::string manifest_path = dir + "/" + kManifestFileName;
  if (manifest.files.size() != 1 || manifest.files[0].file != kHdf5DataFileName) {
    problem(manifest_path, -1, -1, "an hdf5 dataset lists exactly one file, data.h5");
  }
  for (const ShardFileInfo& f : manifest.files) {
    if (f.file == kHdf5DataFileName && f.samples != manifest.samples) {
      problem(manifest_path, -1, -1,
              "data.h5 is listed with " + std::to_string(f.samples) +
                  " samples but the manifest says " + std::to_string(manifest.samples));
    }
  }
  ++report->files_checked;
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) {
    problem(path, -1, -1, "missing: " + Status::FromErrno("cannot stat", path, errno).message());
    return;
  }
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  const ShardFileInfo* expected = manifest.files.empty() ? nullptr : &manifest.files[0];
  if (expected != nullptr && size != expected->bytes) {
    problem(path, -1, static_cast<int64_t>(std::min(size, expected->bytes)),
            "file is " + std::to_string(size) + " bytes but the manifest says " +
                std::to_string(expected->bytes) + (size < expected->bytes ? " (truncated)" : ""));
  }
  Result<std::unique_ptr<MappedFile>> mapped = MappedFile::Open(path);
  if (!mapped.ok()) {
    problem(path, -1, -1, mapped.status().message());
    return;
  }
  const MappedFile& file = **mapped;
  report->bytes_checked += file.size();
  if (expected != nullptr && file.size() > 0) {
    const uint64_t hash = XXH3_64bits(file.data(), file.size());
    if (hash != expected->xxh3_64) {
      problem(path, -1, -1,
              "whole-file hash mismatch (manifest " + HexDigest(expected->xxh3_64) +
                  ", computed " + HexDigest(hash) + ")");
    }
  }
  Result<Hdf5Layout> inspected = Hdf5File::Inspect(path, manifest.schema, manifest.samples, true);
  if (!inspected.ok()) {
    problem(path, -1, -1, inspected.status().message() + "; samples were not checked");
    return;
  }
  const Hdf5Layout& l = *inspected;
  if (l.file_bytes != file.size()) {
    problem(path, -1, -1, "file changed while being verified");
    return;
  }
  Result<Manifest> inner = Manifest::FromJson(l.manifest_attr, path + " attribute kiln_manifest");
  if (!inner.ok()) {
    problem(path, -1, -1, inner.status().message());
  } else if (inner->samples != manifest.samples || inner->schema != manifest.schema) {
    problem(path, -1, -1,
            "attribute kiln_manifest says " + std::to_string(inner->samples) + " samples of " +
                inner->schema.ShapeString() + ", kiln.json " + std::to_string(manifest.samples) +
                " of " + manifest.schema.ShapeString());
  }
  const uint8_t* base = file.data();
  std::vector<uint8_t> scratch(options.deep ? l.sample_bytes : 0);
  RecordDecoder decoder;
  for (uint64_t i = 0; i < l.samples; ++i) {
    const Hdf5Layout::Chunk c = l.Stored(i);
    const int64_t record = static_cast<int64_t>(i);
    const int64_t offset = static_cast<int64_t>(c.offset);
    const int64_t label = static_cast<int64_t>(LoadLE64At(base + l.labels_offset + i * 8));
    const uint64_t want = LoadLE64At(base + l.checksums_offset + i * 8);
    ++report->records_checked;
    if (!manifest.classes.empty() &&
        (label < 0 || static_cast<uint64_t>(label) >= manifest.classes.size())) {
      problem(path, record, static_cast<int64_t>(l.labels_offset + i * 8),
              "label " + std::to_string(label) + " outside the manifest's " +
                  std::to_string(manifest.classes.size()) + " classes");
    }
    if (c.codec == Codec::kZstd && manifest.compression == "none") {
      problem(path, record, offset, "zstd chunk in a dataset whose manifest says compression none");
    }
    const uint64_t computed = RecordChecksum(base + c.offset, c.size, label);
    if (computed != want) {
      problem(path, record, offset,
              "checksum mismatch (stored " + HexDigest(want) + ", computed " +
                  HexDigest(computed) + ")");
      continue;
    }
    if (options.deep) {
      Status s = decoder.Decode(base + c.offset, c.size, c.codec, scratch.data(), scratch.size());
      if (!s.ok()) problem(path, record, offset, "cannot decode: " + s.message());
    }
  }
}

}  // namespace kiln
