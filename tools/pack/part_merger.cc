#include "tools/pack/part_merger.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>

#include "formats/dataset.h"
#include "formats/dataset_writer.h"
#include "formats/file_util.h"
#include "formats/format_registry.h"
#include "formats/record_codec.h"
#include "formats/shards/shard_renumbering.h"
#include "formats/shards/shard_set_writer.h"
#include "formats/verifier.h"
#include "tools/pack/part_lock.h"
#include "tools/pack/partition.h"

namespace kiln {

namespace fs = std::filesystem;
using nlohmann::ordered_json;

namespace {

constexpr char kJournalName[] = "merge-journal.json";
constexpr char kRejectedName[] = "rejected.tsv";
constexpr char kSkippedName[] = "skipped.tsv";

std::string StripSlashes(std::string path) {
  while (path.size() > 1 && path.back() == '/') path.pop_back();
  return path;
}

std::string DescribePart(uint32_t index, uint32_t count) {
  return "part " + std::to_string(index) + " of " + std::to_string(count);
}

// One part, as loaded and checked.
struct Part {
  std::string dir;
  Manifest manifest;
  PackSource source;
  PartitionRecord record;
  std::string rejected_tsv;
  std::string skipped_tsv;  // "" when the part has no skipped.tsv
  std::string name;         // "part I of N"
};

// A shard's move: from the part to the merged dataset, with its new place.
struct Move {
  std::string from;
  std::string to;
  uint32_t shard_index = 0;
  uint64_t first_sample = 0;
};

// Lists the part directories named by `inputs`: a directory of parts (no kiln.json of its own)
// is searched for `part-IIIII-of-NNNNN` entries; refuses leftovers of running or killed packs.
Status FindPartDirs(const std::vector<std::string>& inputs, std::vector<std::string>* dirs,
                    std::vector<std::string>* roots) {
  if (inputs.empty()) return Status::InvalidArgument("kiln merge: no parts given");
  std::error_code ec;
  for (const std::string& raw : inputs) {
    const std::string input = StripSlashes(raw);
    if (fs::exists(input + "/" + kManifestFileName, ec)) {
      dirs->push_back(input);
      continue;
    }
    if (!fs::is_directory(input, ec)) {
      if (fs::exists(input + ".partial", ec)) {
        return Status::Corruption(input + " is incomplete (a killed or running pack left " + input +
                                  ".partial): rerun it with --resume");
      }
      return Status::NotFound(input + " does not exist");
    }
    roots->push_back(input);
    std::vector<std::string> names;
    for (const auto& entry : fs::directory_iterator(input, ec)) {
      names.push_back(entry.path().filename().string());
    }
    std::sort(names.begin(), names.end());
    for (const std::string& name : names) {
      const std::string path = input + "/" + name;
      if (ParsePartDirectoryName(name)) {
        dirs->push_back(path);
        continue;
      }
      for (const char* suffix : {".partial", ".lock"}) {
        const std::string s = suffix;
        if (name.size() <= s.size() || name.compare(name.size() - s.size(), s.size(), s) != 0) {
          continue;
        }
        const std::optional<PartName> p =
            ParsePartDirectoryName(name.substr(0, name.size() - s.size()));
        if (!p) continue;
        const std::string what = DescribePart(p->index, p->count);
        KILN_RETURN_IF_ERROR(PartLock::CheckFree(
            input + "/" + name.substr(0, name.size() - s.size()) + ".lock", what));
        if (s == ".partial") {
          return Status::Corruption(what + " is incomplete (a killed or running pack left " + path +
                                    "): rerun it with --resume");
        }
      }
    }
    if (names.empty() || dirs->empty()) {
      return Status::NotFound(input + " holds no parts (no part-IIIII-of-NNNNN directories)");
    }
  }
  return Status::Ok();
}

// Counts the data lines of a rejected.tsv (every line but the `#` header).
uint64_t RejectedLines(const std::string& tsv) {
  uint64_t lines = 0;
  size_t start = 0;
  while (start < tsv.size()) {
    size_t end = tsv.find('\n', start);
    if (end == std::string::npos) end = tsv.size();
    if (end > start && tsv[start] != '#') ++lines;
    start = end + 1;
  }
  return lines;
}

Status LoadPart(const std::string& dir, Part* part) {
  part->dir = dir;
  Result<Manifest> manifest = Manifest::Read(dir);
  if (!manifest.ok())
    return Status::Corruption("part " + dir + " is damaged: " + manifest.status().message());
  part->manifest = std::move(manifest).value();
  const std::string origin = dir + "/" + kManifestFileName;
  Result<PackSource> source = ParsePackSource(part->manifest.source_json, origin);
  if (!source.ok())
    return Status::Corruption("part " + dir + " is damaged: " + source.status().message());
  part->source = std::move(source).value();
  if (!part->source.partition) {
    return Status::Corruption(dir +
                              " is not a part of a partitioned pack (its kiln.json has no "
                              "source.partition; it was packed without --part)");
  }
  part->record = *part->source.partition;
  part->name = DescribePart(part->record.index, part->record.count);
  const std::string base = fs::path(dir).filename().string();
  const std::optional<PartName> named = ParsePartDirectoryName(base);
  if (named && (named->index != part->record.index || named->count != part->record.count)) {
    return Status::Corruption(
        dir + ": the directory's name says " + DescribePart(named->index, named->count) +
        " but its kiln.json says " + part->name + " (a copied or renamed part?)");
  }
  Result<std::string> tsv = ReadFileToString(dir + "/" + kRejectedName);
  if (!tsv.ok())
    return Status::Corruption(part->name + " (" + dir + ") is damaged: " + tsv.status().message());
  part->rejected_tsv = std::move(tsv).value();
  if (part->source.skipped_list) {
    Result<std::string> skipped = ReadFileToString(dir + "/" + kSkippedName);
    if (!skipped.ok()) {
      return Status::Corruption(part->name + " (" + dir +
                                ") is damaged: " + skipped.status().message());
    }
    part->skipped_tsv = std::move(skipped).value();
  }
  return Status::Ok();
}

// Names the first option that differs between two options objects, or "".
std::string OptionDifference(const Part& a, const Part& b) {
  const ordered_json oa = ordered_json::parse(a.record.options_json, nullptr, false);
  const ordered_json ob = ordered_json::parse(b.record.options_json, nullptr, false);
  std::set<std::string> keys;
  for (auto it = oa.begin(); it != oa.end(); ++it) keys.insert(it.key());
  for (auto it = ob.begin(); it != ob.end(); ++it) keys.insert(it.key());
  for (const std::string& k : keys) {
    const std::string va = oa.contains(k) ? oa[k].dump() : "(unset)";
    const std::string vb = ob.contains(k) ? ob[k].dump() : "(unset)";
    if (va != vb) {
      return b.name + " was packed with " + k + " " + vb + " but " + a.name + " with " + k + " " +
             va;
    }
  }
  return "";
}

std::string VersionDifference(const Part& a, const Part& b) {
  const ordered_json va = ordered_json::parse(a.record.versions_json, nullptr, false);
  const ordered_json vb = ordered_json::parse(b.record.versions_json, nullptr, false);
  std::set<std::string> keys;
  for (auto it = va.begin(); it != va.end(); ++it) keys.insert(it.key());
  for (auto it = vb.begin(); it != vb.end(); ++it) keys.insert(it.key());
  for (const std::string& k : keys) {
    const std::string x = va.contains(k) ? va[k].dump() : "(none)";
    const std::string y = vb.contains(k) ? vb[k].dump() : "(none)";
    if (x != y) {
      return b.name + " was made with " + k + " " + y + " but " + a.name + " with " + k + " " + x +
             ": parts are byte-identical only when every node runs the same kiln build and "
             "libraries";
    }
  }
  return "";
}

// Checks part `p` of a job split by shard file against the reference part `ref`: the same shard
// list, its own place in it (PartRange over the shards: with every index present, the parts are
// disjoint and cover every shard in order), and classes that agree with its labels.
Status CheckShardSplit(const Part& ref, const Part& p, uint32_t n) {
  const PartitionRecord& r = p.record;
  if (r.shard_list_xxh3_64 != ref.record.shard_list_xxh3_64 ||
      r.listed_shards != ref.record.listed_shards) {
    return Status::Corruption(p.name + " was packed from another shard list than " + ref.name +
                              " (" + std::to_string(r.listed_shards) + " shards, shard list hash " +
                              HexDigest(r.shard_list_xxh3_64) + " vs " +
                              std::to_string(ref.record.listed_shards) + " shards, " +
                              HexDigest(ref.record.shard_list_xxh3_64) +
                              "): the parts were given other inputs, or the shards changed "
                              "between parts; pack every part from the same shard list");
  }
  const ItemRange expected = PartRange(r.listed_shards, r.index, n);
  if (!(r.shards == expected)) {
    return Status::Corruption(p.name + " holds shards [" + std::to_string(r.shards.begin) + ", " +
                              std::to_string(r.shards.end) + ") of " +
                              std::to_string(r.listed_shards) + " but the partition rule gives [" +
                              std::to_string(expected.begin) + ", " + std::to_string(expected.end) +
                              ")");
  }
  if (r.listed_items != r.items.size()) {
    return Status::Corruption(p.name + " lists " + std::to_string(r.listed_items) +
                              " samples in its shards but holds items [" +
                              std::to_string(r.items.begin) + ", " + std::to_string(r.items.end) +
                              ")");
  }
  if (p.source.class_map.empty() ? p.manifest.classes != ClassesFromLabelRange(r.label_range)
                                 : p.manifest.classes != ref.manifest.classes) {
    return Status::Corruption(p.name + " has other classes than " +
                              (p.source.class_map.empty() ? "its labels give" : ref.name) + " (" +
                              std::to_string(p.manifest.classes.size()) +
                              "): the part's kiln.json is inconsistent; pack it again");
  }
  return Status::Ok();
}

// Checks that `parts` are the N parts of one job, each once; sorts them by index.
Status CheckPartSet(std::vector<Part>* parts, const std::vector<std::string>& roots) {
  std::sort(parts->begin(), parts->end(),
            [](const Part& a, const Part& b) { return a.record.index < b.record.index; });
  const Part& ref = parts->front();
  const uint32_t n = ref.record.count;
  for (const Part& p : *parts) {
    if (p.record.count != n) {
      return Status::Corruption(p.dir + " is " + p.name + ", but " + ref.dir + " is " + ref.name +
                                ": parts of different --of values cannot be merged");
    }
  }
  for (size_t i = 1; i < parts->size(); ++i) {
    if ((*parts)[i].record.index == (*parts)[i - 1].record.index) {
      return Status::Corruption((*parts)[i].name + " is given twice: " + (*parts)[i - 1].dir +
                                " and " + (*parts)[i].dir);
    }
  }
  std::vector<bool> seen(n, false);
  for (const Part& p : *parts) seen[p.record.index] = true;
  for (uint32_t i = 0; i < n; ++i) {
    if (seen[i]) continue;
    std::string where =
        roots.empty() ? "" : " (expected " + roots.front() + "/" + PartDirectoryName(i, n) + ")";
    return Status::NotFound(DescribePart(i, n) + " is missing" + where + ": pack it with --part " +
                            std::to_string(i) + " --of " + std::to_string(n));
  }
  return Status::Ok();
}

// Checks that part `p` is of the same job as `ref` (of `n` parts): its split, format, options,
// listing and tool versions, and that it holds its items and accounts for its inputs.
Status CheckPartAgainst(const Part& ref, const Part& p, uint32_t n) {
  const PartitionRecord& r = p.record;
  if (r.split_by_shards != ref.record.split_by_shards) {
    const Part& by_shards = r.split_by_shards ? p : ref;
    const Part& by_items = r.split_by_shards ? ref : p;
    return Status::Corruption(by_shards.name + " was split by shard file (tar input) but " +
                              by_items.name +
                              " by listed item: they are not parts of one job; pack every "
                              "part again");
  }
  if (p.manifest.format != ref.manifest.format) {
    return Status::Corruption(p.name + " was packed with --format " + p.manifest.format + " but " +
                              ref.name + " with --format " + ref.manifest.format);
  }
  std::string diff = OptionDifference(ref, p);
  if (!diff.empty()) return Status::Corruption(diff);
  if (r.split_by_shards) {
    KILN_RETURN_IF_ERROR(CheckShardSplit(ref, p, n));
  } else if (p.manifest.classes != ref.manifest.classes) {
    return Status::Corruption(p.name + " has other classes than " + ref.name + " (" +
                              std::to_string(p.manifest.classes.size()) + " vs " +
                              std::to_string(ref.manifest.classes.size()) +
                              "): the input changed between parts; pack every part again");
  }
  if (!r.split_by_shards && (r.listing_xxh3_64 != ref.record.listing_xxh3_64 ||
                             r.listed_items != ref.record.listed_items ||
                             r.listing_problems != ref.record.listing_problems)) {
    return Status::Corruption(p.name + " saw another listing than " + ref.name + " (" +
                              std::to_string(r.listed_items) + " images, listing hash " +
                              HexDigest(r.listing_xxh3_64) + " vs " +
                              std::to_string(ref.record.listed_items) + " images, " +
                              HexDigest(ref.record.listing_xxh3_64) +
                              "): the input changed between parts; pack every part again");
  }
  diff = VersionDifference(ref, p);
  if (!diff.empty()) return Status::Corruption(diff);
  if (r.options_xxh3_64 != ref.record.options_xxh3_64 ||
      p.manifest.preprocessing_json != ref.manifest.preprocessing_json ||
      p.manifest.compression != ref.manifest.compression ||
      p.manifest.shuffle_seed != ref.manifest.shuffle_seed ||
      !(p.manifest.schema == ref.manifest.schema) ||
      p.manifest.record_alignment != ref.manifest.record_alignment) {
    return Status::Corruption(p.name + " was packed with other options than " + ref.name +
                              " (options hash " + HexDigest(r.options_xxh3_64) + " vs " +
                              HexDigest(ref.record.options_xxh3_64) + ")");
  }
  // Split by shard file, a part's items are its own listing (CheckShardSplit checked it).
  const ItemRange expected =
      r.split_by_shards ? ItemRange{0, r.listed_items} : PartRange(r.listed_items, r.index, n);
  if (!(r.items == expected)) {
    return Status::Corruption(p.name + " holds items [" + std::to_string(r.items.begin) + ", " +
                              std::to_string(r.items.end) + ") but the partition rule gives [" +
                              std::to_string(expected.begin) + ", " + std::to_string(expected.end) +
                              ")");
  }
  // Listing problems: part 0's, or each part its own shards' when split by shard file.
  const uint64_t inputs =
      r.items.size() + (r.index == 0 || r.split_by_shards ? r.listing_problems : 0);
  if (p.source.packed + p.source.rejected != inputs || p.source.listed != inputs ||
      p.manifest.samples != p.source.packed) {
    return Status::Corruption(
        p.name + " accounts for " + std::to_string(p.source.packed + p.source.rejected) +
        " of its " + std::to_string(inputs) + " inputs (" + std::to_string(p.source.packed) +
        " packed, " + std::to_string(p.source.rejected) + " rejected, " +
        std::to_string(p.manifest.samples) + " samples)");
  }
  if (RejectedLines(p.rejected_tsv) != p.source.rejected) {
    return Status::Corruption(p.name + ": " + p.dir + "/" + kRejectedName + " lists " +
                              std::to_string(RejectedLines(p.rejected_tsv)) +
                              " rejections, its kiln.json " + std::to_string(p.source.rejected));
  }
  return Status::Ok();
}

// Checks that `parts` are the N parts of one job, each once, and that something was packed;
// sorts them by index.
Status CheckParts(std::vector<Part>* parts, const std::vector<std::string>& roots) {
  KILN_RETURN_IF_ERROR(CheckPartSet(parts, roots));
  const Part& ref = parts->front();
  uint64_t packed = 0;
  for (const Part& p : *parts) {
    KILN_RETURN_IF_ERROR(CheckPartAgainst(ref, p, ref.record.count));
    packed += p.source.packed;
  }
  if (packed == 0) {
    return Status::Corruption("0 images were packed in all " + std::to_string(ref.record.count) +
                              " parts: every input was rejected (see the parts' rejected.tsv)");
  }
  return Status::Ok();
}

// Parts split by file list only their own files, so a key that two parts' files share is seen
// by neither. One pack of the whole input packs both samples of a WebDataset key with a
// warning (as here) but rejects the later TFRecord record with that key, which a merge cannot
// undo: then the merge is refused, naming the key and both parts.
Status CheckKeysAcrossParts(const std::vector<Part>& parts, std::vector<std::string>* warnings) {
  if (!parts.front().record.split_by_shards) return Status::Ok();  // every part lists it all
  std::map<std::string, size_t> part_of;                           // key -> first part
  std::set<std::string> warned;
  for (size_t i = 0; i < parts.size(); ++i) {
    const Part& p = parts[i];
    KILN_ASSIGN_OR_RETURN(std::unique_ptr<Dataset> dataset, Dataset::Open(p.dir));
    for (uint64_t s = 0; s < dataset->num_samples(); ++s) {
      Result<std::string> key = dataset->Key(s);
      if (!key.ok()) return key.status().WithContext(p.name + " is damaged");
      const auto [it, fresh] = part_of.emplace(*key, i);
      if (fresh || it->second == i) continue;
      const std::string both =
          "key " + *key + " is a sample of " + parts[it->second].name + " and of " + p.name;
      if (p.source.kind == "tfrecord") {
        return Status::Corruption(
            both +
            ": one pack of the whole input rejects the later record (keys must be "
            "unique), which a merge cannot do; give the records unique keys "
            "(--feature-key, or files with distinct names), or pack without --part");
      }
      if (warned.insert(*key).second) {
        warnings->push_back(both +
                            " (keys that repeat across shards); all are packed, as one "
                            "pack of the whole input packs them");
      }
    }
  }
  return Status::Ok();
}

// The merged dataset's manifest (but for files) and rejected.tsv, from the checked parts.
void BuildWholeJob(const std::vector<Part>& parts, bool copy_mode, Manifest* manifest,
                   std::string* rejected_tsv, std::string* skipped_tsv) {
  const Part& ref = parts.front();
  *manifest = Manifest();
  manifest->format = ref.manifest.format;
  manifest->tool = ref.manifest.tool;
  manifest->schema = ref.manifest.schema;
  manifest->classes = ref.manifest.classes;
  manifest->compression = ref.manifest.compression;
  manifest->jpeg_quality = ref.manifest.jpeg_quality;
  manifest->jpeg_max_side = ref.manifest.jpeg_max_side;
  manifest->record_alignment = ref.manifest.record_alignment;
  manifest->shuffle_seed = ref.manifest.shuffle_seed;
  manifest->preprocessing_json = ref.manifest.preprocessing_json;
  const bool by_shards = ref.record.split_by_shards;
  if (by_shards && ref.source.class_map.empty()) {
    // As one pack of the whole input derives them: from every part's labels.
    std::optional<std::pair<int64_t, int64_t>> labels;
    for (const Part& p : parts) {
      const auto& l = p.record.label_range;
      if (!l) continue;
      if (!labels) labels = l;
      labels->first = std::min(labels->first, l->first);
      labels->second = std::max(labels->second, l->second);
    }
    manifest->classes = ClassesFromLabelRange(labels);
  }
  PackSource source;
  source.input = ref.source.input;
  source.kind = ref.source.kind;
  source.root = ref.source.root;
  source.class_map = ref.source.class_map;
  // Files skipped for their name are a listing matter: part 0 counts and lists them.
  source.skipped = ref.source.skipped;
  source.skipped_list = ref.source.skipped_list;
  *skipped_tsv = ref.skipped_tsv;
  // Moved shards keep the parts' boundaries: the manifest says so, as `kiln pack --of N` does.
  source.parts = copy_mode ? 1 : ref.record.count;
  rejected_tsv->clear();
  // Split by shard file, each part lists its own shards: the listing problems of every part
  // come first, in part order, then the other rejections, as one pack of the whole input
  // writes them.
  std::string listing_rows, other_rows;
  if (by_shards) {
    source.skipped = 0;
    skipped_tsv->clear();
  }
  for (const Part& p : parts) {
    source.listed += p.source.listed;
    source.packed += p.source.packed;
    source.rejected += p.source.rejected;
    manifest->samples += p.manifest.samples;
    if (by_shards) {
      *source.skipped += p.source.skipped.value_or(0);
      source.skipped_list = source.skipped_list || p.source.skipped_list;
      if (!p.skipped_tsv.empty()) {
        const size_t body = p.skipped_tsv.find('\n');
        if (skipped_tsv->empty()) {
          *skipped_tsv = p.skipped_tsv;  // header line included
        } else if (body != std::string::npos) {
          skipped_tsv->append(p.skipped_tsv, body + 1);
        }
      }
    }
    const size_t header_end = p.rejected_tsv.find('\n');
    if (rejected_tsv->empty()) {
      *rejected_tsv = p.rejected_tsv.substr(
          0, header_end == std::string::npos ? p.rejected_tsv.size() : header_end + 1);
    }
    if (header_end == std::string::npos) continue;
    const std::string body = p.rejected_tsv.substr(header_end + 1);
    if (!by_shards) {
      other_rows += body;
      continue;
    }
    size_t cut = 0;
    for (uint64_t row = 0; row < p.record.listing_problems && cut < body.size(); ++row) {
      const size_t end = body.find('\n', cut);
      cut = end == std::string::npos ? body.size() : end + 1;
    }
    listing_rows.append(body, 0, cut);
    other_rows.append(body, cut, std::string::npos);
  }
  *rejected_tsv += listing_rows + other_rows;
  manifest->source_json = PackSourceJson(source);
}

// Plans every move, reading each shard once: checks its size, its hash against the part's
// manifest and its header, and records the hash it will have once renumbered.
// `step`, when set, is called with each checked shard's sample count.
Status PlanMoves(const std::vector<Part>& parts, const std::string& staging,
                 std::vector<Move>* moves, std::vector<DataFileInfo>* files, uint64_t* bytes_read,
                 const std::function<void(uint64_t samples)>& step = nullptr) {
  uint32_t global = 0;
  uint64_t first = 0;
  for (const Part& p : parts) {
    uint64_t local_first = 0;
    for (size_t s = 0; s < p.manifest.files.size(); ++s) {
      const DataFileInfo& f = p.manifest.files[s];
      const std::string path = p.dir + "/" + f.file;
      Result<ShardRenumberingPlan> plan = PlanShardRenumbering(path, global, first);
      if (!plan.ok()) {
        return plan.status().code() == StatusCode::kNotFound ||
                       plan.status().code() == StatusCode::kIOError
                   ? Status::Corruption(p.name +
                                        ": shard missing or unreadable: " + plan.status().message())
                   : Status::Corruption(p.name + " is damaged: " + plan.status().message());
      }
      if (plan->bytes != f.bytes) {
        return Status::Corruption(p.name + ": " + path + " has " + std::to_string(plan->bytes) +
                                  " bytes, its kiln.json says " + std::to_string(f.bytes) +
                                  " (truncated or resized)");
      }
      if (plan->current_xxh3_64 != f.xxh3_64) {
        return Status::Corruption(p.name + ": " + path + " is damaged: whole-file hash " +
                                  FormatChecksum(plan->current_xxh3_64) + ", its kiln.json says " +
                                  FormatChecksum(f.xxh3_64));
      }
      if (plan->current.shard_index != s || plan->current.first_sample != local_first) {
        return Status::Corruption(p.name + ": " + path + "'s header says shard " +
                                  std::to_string(plan->current.shard_index) + " from sample " +
                                  std::to_string(plan->current.first_sample) + ", not shard " +
                                  std::to_string(s) + " from sample " +
                                  std::to_string(local_first));
      }
      *bytes_read += plan->bytes;
      if (step) step(f.samples);
      Move m;
      m.from = path;
      m.to = staging + "/" + ShardFileName(global);
      m.shard_index = global;
      m.first_sample = first;
      moves->push_back(m);
      files->push_back({ShardFileName(global), f.samples, f.bytes, plan->renumbered_xxh3_64,
                        plan->index_xxh3_64});
      ++global;
      first += f.samples;
      local_first += f.samples;
    }
  }
  return Status::Ok();
}

std::string JournalJson(const std::vector<Move>& moves, const std::vector<std::string>& part_dirs,
                        const std::vector<std::string>& roots, const std::string& manifest_text,
                        const std::string& rejected_tsv, const std::string& skipped_tsv) {
  ordered_json j;
  ordered_json m = ordered_json::array();
  for (const Move& x : moves) {
    m.push_back({{"from", x.from},
                 {"to", x.to},
                 {"shard_index", x.shard_index},
                 {"first_sample", x.first_sample}});
  }
  j["moves"] = m;
  j["parts"] = part_dirs;
  j["roots"] = roots;
  j["manifest"] = manifest_text;
  j["rejected"] = rejected_tsv;
  j["skipped"] = skipped_tsv;
  return j.dump(1);
}

// For tests of a merge killed halfway: KILN_FAULT_MERGE_KILL_AFTER=K makes the merge SIGKILL
// itself after renumbering K shards (tests/scale/, "merge killed").
void MaybeKillForTest(size_t renumbered) {
  static const char* after = std::getenv("KILN_FAULT_MERGE_KILL_AFTER");
  if (after != nullptr && std::strtoull(after, nullptr, 10) == renumbered)
    ::kill(::getpid(), SIGKILL);
}

void SyncDir(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd >= 0) {
    ::fsync(fd);
    ::close(fd);
  }
}

// Carries out a journal: idempotent, so a resumed merge runs it again from the start.
Status RunJournal(const std::string& staging, const std::string& output) {
  KILN_ASSIGN_OR_RETURN(std::string text, ReadFileToString(staging + "/" + kJournalName));
  const ordered_json j = ordered_json::parse(text, nullptr, false);
  if (j.is_discarded()) return Status::Corruption(staging + "/" + kJournalName + " is unreadable");
  std::vector<std::string> part_dirs, roots;
  std::string manifest_text, rejected, skipped;
  std::vector<Move> moves;
  try {
    part_dirs = j.at("parts").get<std::vector<std::string>>();
    roots = j.at("roots").get<std::vector<std::string>>();
    manifest_text = j.at("manifest").get<std::string>();
    rejected = j.at("rejected").get<std::string>();
    skipped = j.value("skipped", "");
    for (const auto& m : j.at("moves")) {
      moves.push_back({m.at("from").get<std::string>(), m.at("to").get<std::string>(),
                       m.at("shard_index").get<uint32_t>(), m.at("first_sample").get<uint64_t>()});
    }
  } catch (const std::exception& e) {
    return Status::Corruption(staging + "/" + kJournalName + ": " + e.what());
  }
  // A consumed part must never look complete: its manifest goes before its first shard.
  for (const std::string& dir : part_dirs) {
    const std::string m = dir + "/" + kManifestFileName;
    if (::unlink(m.c_str()) != 0 && errno != ENOENT)
      return Status::FromErrno("cannot remove", m, errno);
    SyncDir(dir);
  }
  std::error_code ec;
  for (size_t i = 0; i < moves.size(); ++i) {
    const Move& m = moves[i];
    if (!fs::exists(m.to, ec)) {
      if (::rename(m.from.c_str(), m.to.c_str()) != 0) {
        return Status::FromErrno("cannot move " + m.from + " to", m.to, errno);
      }
    }
    KILN_RETURN_IF_ERROR(RenumberShard(m.to, m.shard_index, m.first_sample));
    MaybeKillForTest(i + 1);
  }
  SyncDir(staging);
  KILN_RETURN_IF_ERROR(WriteFileAtomically(staging + "/" + kRejectedName, rejected));
  if (!skipped.empty()) {
    KILN_RETURN_IF_ERROR(WriteFileAtomically(staging + "/" + kSkippedName, skipped));
  }
  KILN_RETURN_IF_ERROR(WriteFileAtomically(staging + "/" + kManifestFileName, manifest_text));
  // The marker and the journal stay until the rename, so that a merge killed before it resumes
  // (--resume replays the journal); killed after it, the output is complete.
  KillHereForTest("merge-rename");
  // An empty directory, or (--overwrite, checked before) the kiln dataset it replaces.
  if (fs::exists(output, ec) && ::rmdir(output.c_str()) != 0) {
    KILN_RETURN_IF_ERROR(RemoveTree(output));
  }
  if (::rename(staging.c_str(), output.c_str()) != 0) {
    return Status::FromErrno("cannot rename " + staging + " to", output, errno);
  }
  ::unlink((output + "/" + kStagingMarkerFileName).c_str());
  ::unlink((output + "/" + kJournalName).c_str());
  SyncDir(fs::path(output).parent_path().empty() ? "." : fs::path(output).parent_path().string());
  // The emptied parts: their rejected.tsv, staging markers and lock files, then the folder.
  for (const std::string& dir : part_dirs) {
    KILN_RETURN_IF_ERROR(RemoveTree(dir));
    ::unlink((dir + ".lock").c_str());
  }
  for (const std::string& root : roots) ::rmdir(root.c_str());  // only when empty
  return Status::Ok();
}

// `step`, when set, is called after each copied record with 1.
Status CopyRecords(const std::vector<Part>& parts, const std::string& output, Manifest manifest,
                   const std::string& rejected_tsv, const std::string& skipped_tsv,
                   const std::function<void(uint64_t samples)>& step, MergeReport* report) {
  const Part& ref = parts.front();
  if (ref.manifest.jpeg_records()) {
    // Copying decodes every record into a tensor and encodes it again; JPEG records would need
    // their stored bytes carried over instead.
    return Status::NotSupported(
        ref.name +
        " holds JPEG records: kiln merge --reshard does not copy them yet; "
        "merge without --reshard (the parts' shards are moved as they are)");
  }
  const ordered_json options = ordered_json::parse(ref.record.options_json, nullptr, false);
  DatasetWriterOptions wo;
  wo.schema = ref.manifest.schema;
  wo.format = ref.manifest.format;
  wo.record_alignment = ref.manifest.record_alignment;
  if (options.contains("--shard-size") && options["--shard-size"].is_number_unsigned()) {
    wo.shard_size_bytes = options["--shard-size"].get<uint64_t>();
  }
  KILN_ASSIGN_OR_RETURN(Compression compression, Compression::Parse(ref.manifest.compression));
  KILN_ASSIGN_OR_RETURN(std::unique_ptr<DatasetWriter> writer, DatasetWriter::Create(output, wo));
  RecordEncoder encoder(compression);
  RecordDecoder decoder;
  std::vector<uint8_t> raw(ref.manifest.schema.sample_bytes());
  EncodedRecord record;
  for (const Part& p : parts) {
    KILN_ASSIGN_OR_RETURN(std::unique_ptr<Dataset> dataset, Dataset::Open(p.dir));
    for (uint64_t i = 0; i < dataset->num_samples(); ++i) {
      int64_t label = 0;
      Status s = dataset->ReadSample(i, &decoder, raw.data(), &label);
      if (!s.ok()) return s.WithContext(p.name + " is damaged");
      Result<std::string> key = dataset->Key(i);
      if (!key.ok()) return key.status().WithContext(p.name + " is damaged");
      KILN_RETURN_IF_ERROR(encoder.Encode(raw.data(), raw.size(), label, *key, &record));
      KILN_RETURN_IF_ERROR(writer->Add(record));
      report->bytes_read += raw.size();
      if (step) step(1);
    }
  }
  KILN_RETURN_IF_ERROR(writer->AddFile(kRejectedName, rejected_tsv));
  if (!skipped_tsv.empty()) KILN_RETURN_IF_ERROR(writer->AddFile(kSkippedName, skipped_tsv));
  KILN_ASSIGN_OR_RETURN(report->manifest, writer->Finish(std::move(manifest)));
  return Status::Ok();
}

// Copy mode reads every part's records: checks first that each shard part's files are whole
// (their hashes, as a move would) and that every other part verifies.
Status CheckBeforeCopying(const std::vector<Part>& parts, const std::string& staging,
                          MergeReport* report) {
  for (const Part& p : parts) {
    if (HasSelfContainedFiles(p.manifest.format)) {
      std::vector<Move> unused_moves;
      std::vector<DataFileInfo> unused_files;
      KILN_RETURN_IF_ERROR(
          PlanMoves({p}, staging, &unused_moves, &unused_files, &report->bytes_read));
      continue;
    }
    const VerifyReport v = VerifyDataset(p.dir, VerifyOptions{});
    if (!v.ok()) {
      return Status::Corruption(p.name + " is damaged: kiln verify " + p.dir + " finds " +
                                std::to_string(v.problems.size()) +
                                " problems, first: " + v.problems.front().reason);
    }
  }
  return Status::Ok();
}

// Move mode: plans the moves of the parts' shards into `output` (renumbered), writes the
// journal into `staging` and runs it.
Status MoveShards(const std::vector<Part>& parts, const std::vector<std::string>& roots,
                  const std::string& staging, const std::string& output, Manifest manifest,
                  const std::string& rejected_tsv, const std::string& skipped_tsv,
                  const std::function<void(uint64_t samples)>& step, MergeReport* report) {
  std::error_code ec;
  std::vector<Move> moves;
  std::vector<DataFileInfo> files;
  KILN_RETURN_IF_ERROR(PlanMoves(parts, staging, &moves, &files, &report->bytes_read, step));
  manifest.files = files;
  // Moving needs one file system: refuse before the first rename rather than halfway.
  if (fs::exists(staging, ec)) {
    if (!fs::exists(staging + "/" + kStagingMarkerFileName, ec)) {
      return Status::InvalidArgument(staging + " exists and was not made by kiln; move it away");
    }
    KILN_RETURN_IF_ERROR(RemoveTree(staging));  // a merge killed before its journal
  }
  if (::mkdir(staging.c_str(), 0755) != 0) {
    return Status::FromErrno("cannot create directory", staging, errno);
  }
  KILN_RETURN_IF_ERROR(WriteFileAtomically(staging + "/" + kStagingMarkerFileName,
                                           "kiln staging directory of a merge\n"));
  if (!moves.empty()) {
    struct stat a, b;
    if (::stat(moves.front().from.c_str(), &a) != 0 || ::stat(staging.c_str(), &b) != 0 ||
        a.st_dev != b.st_dev) {
      (void)RemoveTree(staging);
      return Status::InvalidArgument("the parts and " + output +
                                     " are on different file systems: moving shards needs "
                                     "one; choose an output beside the parts, or --reshard");
    }
  }
  std::vector<std::string> part_dirs;
  for (const Part& p : parts) part_dirs.push_back(p.dir);
  KILN_RETURN_IF_ERROR(WriteFileAtomically(
      staging + "/" + kJournalName,
      JournalJson(moves, part_dirs, roots, manifest.ToJson(), rejected_tsv, skipped_tsv)));
  SyncDir(staging);
  KILN_RETURN_IF_ERROR(RunJournal(staging, output));
  report->manifest = manifest;
  return Status::Ok();
}

}  // namespace

Result<MergeReport> MergeParts(const MergeOptions& options) {
  const auto start = std::chrono::steady_clock::now();
  MergeReport report;
  const std::string output = StripSlashes(options.output);
  if (output.empty()) return Status::InvalidArgument("the output path is empty");
  report.output = output;
  const std::string staging = output + ".partial";
  // An output inside a part (or holding one) would be deleted with the parts, or merge a part
  // into itself: refused before anything, even the lock file, is written.
  for (const std::string& input : options.inputs) {
    if (PathsOverlap(input, output)) {
      return Status::InvalidArgument("output " + output + " and input " + input +
                                     " overlap; write the merged dataset outside the parts");
    }
  }
  // One writer per output: a second merge, or a pack, into it is refused before either
  // touches OUTPUT.partial.
  KILN_ASSIGN_OR_RETURN(const std::unique_ptr<OutputLock> output_lock, OutputLock::Acquire(output));
  std::error_code ec;
  if (fs::exists(output, ec) && !(fs::is_directory(output, ec) && fs::is_empty(output, ec))) {
    if (!options.overwrite) {
      return Status::InvalidArgument("output " + output +
                                     " exists and is not empty (choose another path, or pass "
                                     "--overwrite to replace it)");
    }
    // --overwrite replaces a kiln dataset, never an arbitrary directory of the user's.
    if (!fs::is_directory(output, ec) || !fs::exists(output + "/" + kManifestFileName, ec)) {
      return Status::InvalidArgument("refusing to overwrite " + output +
                                     ": it is not a kiln dataset (no " + kManifestFileName + ")");
    }
  }
  if (fs::exists(staging + "/" + kJournalName, ec)) {
    if (!options.resume) {
      return Status::InvalidArgument("a merge into " + output + " was interrupted (" + staging +
                                     " holds its journal): run the same kiln merge with --resume");
    }
    KILN_RETURN_IF_ERROR(RunJournal(staging, output));
    KILN_ASSIGN_OR_RETURN(report.manifest, Manifest::Read(output));
    report.resumed = true;
  } else {
    std::vector<std::string> dirs, roots;
    KILN_RETURN_IF_ERROR(FindPartDirs(options.inputs, &dirs, &roots));
    std::vector<Part> parts(dirs.size());
    for (size_t i = 0; i < dirs.size(); ++i) KILN_RETURN_IF_ERROR(LoadPart(dirs[i], &parts[i]));
    for (const Part& p : parts) {
      KILN_RETURN_IF_ERROR(PartLock::CheckFree(p.dir + ".lock", p.name));
    }
    KILN_RETURN_IF_ERROR(CheckParts(&parts, roots));
    KILN_RETURN_IF_ERROR(CheckKeysAcrossParts(parts, &report.warnings));
    const bool copy_mode = options.reshard || !HasSelfContainedFiles(parts.front().manifest.format);
    uint64_t samples_total = 0, samples_done = 0;
    for (const Part& p : parts) samples_total += p.manifest.samples;
    const auto step = [&](uint64_t samples) {
      samples_done += samples;
      if (options.progress) options.progress(samples_done, samples_total);
    };
    report.copied = copy_mode;
    Manifest manifest;
    std::string rejected_tsv, skipped_tsv;
    BuildWholeJob(parts, copy_mode, &manifest, &rejected_tsv, &skipped_tsv);
    if (copy_mode) {
      KILN_RETURN_IF_ERROR(CheckBeforeCopying(parts, staging, &report));
      report.bytes_read = 0;  // counted again as records are copied
      KILN_RETURN_IF_ERROR(CopyRecords(parts, output, std::move(manifest), rejected_tsv,
                                       skipped_tsv, step, &report));
    } else {
      KILN_RETURN_IF_ERROR(MoveShards(parts, roots, staging, output, std::move(manifest),
                                      rejected_tsv, skipped_tsv, step, &report));
    }
    report.parts = parts.front().record.count;
  }
  if (report.parts == 0) {
    Result<PackSource> s = ParsePackSource(report.manifest.source_json, output);
    report.parts = s.ok() ? s->parts : 0;
  }
  Result<PackSource> source = ParsePackSource(report.manifest.source_json, output);
  if (source.ok()) report.rejected = source->rejected;
  report.samples = report.manifest.samples;
  report.files = report.manifest.files.size();
  for (const DataFileInfo& f : report.manifest.files) report.bytes += f.bytes;
  report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return report;
}

std::string MergeReportJson(const MergeReport& r) {
  ordered_json j;
  j["output"] = r.output;
  j["parts"] = r.parts;
  j["samples"] = r.samples;
  j["rejected"] = r.rejected;
  j["files"] = r.files;
  j["bytes"] = r.bytes;
  j["bytes_read"] = r.bytes_read;
  j["mode"] = r.copied ? "copied" : "moved";
  j["resumed"] = r.resumed;
  j["seconds"] = r.seconds;
  j["mb_per_s"] = r.seconds > 0 ? r.bytes_read / 1e6 / r.seconds : 0.0;
  j["warnings"] = r.warnings;
  return j.dump();
}

}  // namespace kiln
