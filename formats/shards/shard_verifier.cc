#include "formats/shards/shard_verifier.h"

#include <algorithm>
#include <filesystem>
#include <set>
#include <system_error>
#include <thread>
#include <vector>

#include "formats/record_codec.h"
#include "formats/shards/shard_reader.h"
#include "formats/verifier_checks.h"

namespace kiln {

namespace {

// The largest sample deep verification decodes without a manifest to vouch for it: 1 GiB.
constexpr uint64_t kMaxDeepSampleBytes = uint64_t{1} << 30;

class Checker {
 public:
  Checker(VerifyReport* report, const VerifyOptions& options, DataFileMapper map)
      : report_(report), options_(options), map_(std::move(map)) {}

  // Sets the manifest whose promises (classes, alignment, compression) records are held to.
  void set_manifest(const Manifest* manifest) { manifest_ = manifest; }

  void Problem(const std::string& file, int64_t record, int64_t offset, std::string reason) {
    report_->problems.push_back({file, record, offset, std::move(reason)});
  }

  // Checks one shard file. `expected` is null when there is no manifest to compare with.
  void CheckShard(const std::string& path, const DataFileInfo* expected, uint32_t shard_index,
                  uint64_t first_sample, const TensorSchema* schema) {
    std::shared_ptr<const MappedFile> file = map_(path, expected, report_);
    if (!file) return;
    // The whole-file hash reads the file on a thread of its own while the records are checked
    // here (each pass reads the file once): about 1.6x on 2 cores for large records. Its
    // problem, if any, is reported before the file's others, as when it ran first.
    std::string hash_problem;
    std::thread hasher;
    if (expected) {
      try {
        hasher = std::thread([&] { hash_problem = WholeFileHashProblem(*file, *expected); });
      } catch (const std::system_error&) {
        // No thread to be had (RLIMIT_NPROC, RLIMIT_AS): hash on this one, after the records.
      }
    }
    const size_t first_problem = report_->problems.size();
    CheckShardContents(path, file, expected, shard_index, first_sample, schema);
    if (hasher.joinable()) {
      hasher.join();
    } else if (expected) {
      hash_problem = WholeFileHashProblem(*file, *expected);
    }
    if (!hash_problem.empty()) {
      report_->problems.insert(
          report_->problems.begin() + static_cast<std::ptrdiff_t>(first_problem),
          {path, -1, -1, std::move(hash_problem)});
    }
  }

  // Everything CheckShard checks but the whole-file hash, on the file's mapping.
  void CheckShardContents(const std::string& path, const std::shared_ptr<const MappedFile>& file,
                          const DataFileInfo* expected, uint32_t shard_index, uint64_t first_sample,
                          const TensorSchema* schema) {
    const uint64_t size = file->size();
    Result<std::unique_ptr<ShardReader>> opened = ShardReader::Open(file);
    if (!opened.ok()) {
      // ShardReader::Open locates header problems at 0 and footer problems at the footer.
      const Status& s = opened.status();
      Problem(path, -1, s.location().offset >= 0 ? s.location().offset : 0,
              std::string(s.reason()) + "; records in this file were not checked");
      return;
    }
    const ShardReader& shard = **opened;
    const ShardHeader& h = shard.header();
    if (manifest_ && h.record_alignment != manifest_->record_alignment) {
      Problem(path, -1, 20,
              "record alignment " + std::to_string(h.record_alignment) +
                  " differs from the manifest's " + std::to_string(manifest_->record_alignment));
    }
    if (schema && h.schema != *schema) {
      Problem(path, -1, 24,
              "shard schema " + h.schema.ShapeString() + " differs from the manifest's " +
                  schema->ShapeString());
    }
    if (manifest_ && h.jpeg_max_side != manifest_->jpeg_max_side) {
      Problem(path, -1, 12,
              "header's JPEG max side " + std::to_string(h.jpeg_max_side) +
                  " (0: not JPEG records) differs from the manifest's " +
                  std::to_string(manifest_->jpeg_max_side));
    }
    if (expected) {
      if (h.shard_index != shard_index || h.first_sample != first_sample) {
        Problem(path, -1, 36,
                "header says shard " + std::to_string(h.shard_index) + " from sample " +
                    std::to_string(h.first_sample) + ", manifest order says shard " +
                    std::to_string(shard_index) + " from sample " + std::to_string(first_sample));
      }
      if (shard.record_count() != expected->samples) {
        Problem(path, -1, static_cast<int64_t>(size - 64 + 8),
                "footer says " + std::to_string(shard.record_count()) + " records, manifest says " +
                    std::to_string(expected->samples));
      }
    }
    if (expected && expected->index_xxh3_64 &&
        *expected->index_xxh3_64 != shard.footer().index_checksum) {
      Problem(path, -1, static_cast<int64_t>(size - kShardFooterBytes + 32),
              "belongs to another pack: its index checksum " +
                  FormatChecksum(shard.footer().index_checksum) + " differs from " +
                  FormatChecksum(*expected->index_xxh3_64) + ", which " + kManifestFileName +
                  " records for files[" + std::to_string(shard_index) +
                  "] (its records, labels or keys are not this dataset's: a copy mixed two "
                  "datasets?)");
    }
    Status index_ok = shard.VerifyIndexChecksum();
    if (!index_ok.ok()) {
      Problem(path, -1, static_cast<int64_t>(shard.footer().index_offset),
              "index checksum mismatch: labels, keys or record locations are damaged");
    }
    // Deep mode decodes into a buffer sized by the manifest's schema (the header's may be
    // damaged and claim gigabytes); records of another size were reported above.
    const TensorSchema& decode_schema = schema ? *schema : h.schema;
    const bool deep = options_.deep && decode_schema.sample_bytes() <= kMaxDeepSampleBytes &&
                      decode_schema.sample_bytes() == h.schema.sample_bytes();
    if (options_.deep && !deep) {
      Problem(path, -1, 24,
              "records not decoded: the header's sample size " +
                  std::to_string(h.schema.sample_bytes()) +
                  " bytes is implausible "
                  "or differs from the manifest's");
    }
    std::vector<uint8_t> scratch(deep ? decode_schema.sample_bytes() : 0);
    // JPEG records are decoded by the caller's image decoder (formats/ has none).
    bool decode_records = deep;
    if (deep && h.jpeg_records()) {
      decoder_.set_image_decoder(options_.image_decoder.get());
      if (options_.image_decoder == nullptr) {
        decode_records = false;
        Problem(path, -1, 12,
                "JPEG records not decoded: this verifier has no JPEG decoder "
                "(VerifyOptions::image_decoder; kiln verify --deep has one)");
      }
    }
    for (uint64_t i = 0; i < shard.record_count(); ++i) {
      const ShardIndexEntry e = shard.entry(i);
      const std::string entry_problem = shard.EntryProblem(e);
      if (!entry_problem.empty()) {
        Problem(path, static_cast<int64_t>(i), static_cast<int64_t>(shard.EntryOffset(i)),
                "bad index entry: " + entry_problem);
        continue;
      }
      ++report_->records_checked;
      if (options_.progress) {
        options_.progress(report_->records_checked, manifest_ ? manifest_->samples : 0);
      }
      if (manifest_ && !manifest_->classes.empty() &&
          (e.label < 0 || static_cast<uint64_t>(e.label) >= manifest_->classes.size())) {
        Problem(path, static_cast<int64_t>(i), static_cast<int64_t>(shard.EntryOffset(i)),
                "label " + std::to_string(e.label) + " outside the manifest's " +
                    std::to_string(manifest_->classes.size()) + " classes");
      }
      if (manifest_ && e.codec == Codec::kZstd && manifest_->compression == "none") {
        Problem(path, static_cast<int64_t>(i), static_cast<int64_t>(shard.EntryOffset(i)),
                "zstd record in a dataset whose manifest says compression none");
      }
      const uint64_t computed = RecordChecksum(shard.stored(e), e.stored_size, e.label);
      if (computed != e.checksum) {
        Problem(path, static_cast<int64_t>(i), static_cast<int64_t>(e.offset),
                "checksum mismatch (stored " + HexDigest(e.checksum) + ", computed " +
                    HexDigest(computed) + ")");
        continue;
      }
      if (decode_records) {
        // A JPEG record decodes to its own size (raw_size, at most the schema's); the others to
        // exactly the schema's.
        Status s = decoder_.Validate(shard.stored(e), e.stored_size, e.codec, scratch.data(),
                                     e.codec == Codec::kJpeg ? e.raw_size : scratch.size());
        if (!s.ok()) {
          Problem(path, static_cast<int64_t>(i), static_cast<int64_t>(e.offset),
                  "cannot decode: " + s.message());
        }
      }
    }
  }

 private:
  VerifyReport* report_;
  VerifyOptions options_;
  DataFileMapper map_;
  const Manifest* manifest_ = nullptr;
  RecordDecoder decoder_;
};

// Shard-like files in `dir`, sorted: what a dataset directory holds besides the manifest.
std::vector<std::string> ShardFilesIn(const std::string& dir) {
  std::vector<std::string> names;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.size() > kShardSuffix.size() &&
        name.compare(name.size() - kShardSuffix.size(), kShardSuffix.size(), kShardSuffix) == 0) {
      names.push_back(name);
    }
  }
  std::sort(names.begin(), names.end());
  return names;
}

}  // namespace

namespace {

// The manifest's files, in order, against the manifest (every check but unlisted files).
void CheckListedShards(const std::string& dir, const Manifest& manifest, Checker* checker) {
  checker->set_manifest(&manifest);
  uint64_t first_sample = 0;
  for (size_t s = 0; s < manifest.files.size(); ++s) {
    const DataFileInfo& info = manifest.files[s];
    checker->CheckShard(dir + "/" + info.file, &info, static_cast<uint32_t>(s), first_sample,
                        &manifest.schema);
    first_sample += info.samples;
  }
  if (first_sample != manifest.samples) {
    checker->Problem(dir + "/" + kManifestFileName, -1, -1,
                     "files list " + std::to_string(first_sample) +
                         " samples but the manifest says " + std::to_string(manifest.samples));
  }
}

}  // namespace

void VerifyShardDataset(const std::string& dir, const Manifest* manifest,
                        const VerifyOptions& options, VerifyReport* report) {
  Checker checker(report, options, MapFileAgainstManifest);
  if (manifest == nullptr) {
    // Without a manifest each shard is still checked on its own.
    for (const std::string& name : ShardFilesIn(dir)) {
      checker.CheckShard(dir + "/" + name, nullptr, 0, 0, nullptr);
    }
    return;
  }
  CheckListedShards(dir, *manifest, &checker);
  std::set<std::string> listed;
  for (const DataFileInfo& info : manifest->files) listed.insert(info.file);
  for (const std::string& name : ShardFilesIn(dir)) {
    if (listed.count(name) == 0) {
      checker.Problem(dir + "/" + name, -1, -1, "shard file not listed in the manifest");
    }
  }
}

void VerifyShardFiles(const std::string& location, const Manifest& manifest,
                      const VerifyOptions& options, const DataFileMapper& map,
                      VerifyReport* report) {
  Checker checker(report, options, map);
  CheckListedShards(location, manifest, &checker);
}

}  // namespace kiln
