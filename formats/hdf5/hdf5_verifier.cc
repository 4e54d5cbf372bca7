#include "formats/hdf5/hdf5_verifier.h"

#include <memory>
#include <vector>

#include "formats/byte_coding.h"
#include "formats/hdf5/hdf5_format.h"
#include "formats/hdf5/hdf5_inspector.h"
#include "formats/mapped_file.h"
#include "formats/record_codec.h"
#include "formats/verifier_checks.h"

namespace kiln {

void VerifyHdf5Dataset(const std::string& dir, const Manifest& manifest,
                       const VerifyOptions& options, VerifyReport* report) {
  const std::string path = dir + "/" + kHdf5DataFileName;
  auto problem = [&](const std::string& file, int64_t record, int64_t offset, std::string why) {
    report->problems.push_back({file, record, offset, std::move(why)});
  };
  CheckSingleFileManifest(dir, manifest, kHdf5DataFileName, "hdf5", report);
  const DataFileInfo* expected = manifest.files.empty() ? nullptr : &manifest.files[0];
  const std::unique_ptr<MappedFile> mapped = CheckFileAgainstManifest(path, expected, report);
  if (!mapped) return;
  const MappedFile& file = *mapped;
  Result<Hdf5Layout> inspected =
      Hdf5Inspector::Inspect(path, manifest.schema, manifest.samples, true);
  if (!inspected.ok()) {
    problem(path, -1, -1, ProblemReason(inspected.status(), path) + "; samples were not checked");
    return;
  }
  const Hdf5Layout& l = *inspected;
  if (l.file_bytes != file.size()) {
    problem(path, -1, -1, "file changed while being verified");
    return;
  }
  Result<Manifest> inner = Manifest::FromJson(l.manifest_attr, path);
  if (!inner.ok()) {
    problem(path, -1, -1, "attribute kiln_manifest: " + ProblemReason(inner.status(), path));
  } else if (inner->samples != manifest.samples || inner->schema != manifest.schema) {
    problem(path, -1, -1,
            "attribute kiln_manifest says " + std::to_string(inner->samples) + " samples of " +
                inner->schema.ShapeString() + ", kiln.json " + std::to_string(manifest.samples) +
                " of " + manifest.schema.ShapeString());
  }
  const uint8_t* base = file.data();
  Status keys = CheckHdf5KeysChecksum(l, base, path);
  if (!keys.ok()) {
    problem(path, -1, keys.location().offset,
            std::string(keys.reason()) + ": a key is damaged (keys have no per-sample checksum)");
  }
  std::vector<uint8_t> scratch(options.deep ? l.sample_bytes : 0);
  RecordDecoder decoder;
  for (uint64_t i = 0; i < l.samples; ++i) {
    const Hdf5Layout::Chunk c = l.Stored(i);
    const int64_t record = static_cast<int64_t>(i);
    const int64_t offset = static_cast<int64_t>(c.offset);
    const int64_t label = static_cast<int64_t>(LoadLE64(base + l.labels_offset + i * 8));
    const uint64_t want = LoadLE64(base + l.checksums_offset + i * 8);
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
              "checksum mismatch (stored " + HexDigest(want) + ", computed " + HexDigest(computed) +
                  ")");
      continue;
    }
    if (options.deep) {
      Status s = decoder.Validate(base + c.offset, c.size, c.codec, scratch.data(), scratch.size());
      if (!s.ok()) problem(path, record, offset, "cannot decode: " + s.message());
    }
  }
}

}  // namespace kiln
