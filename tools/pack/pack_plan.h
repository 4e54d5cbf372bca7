// kiln::PackPlan: the plan file of a partitioned pack (`kiln plan INPUT --of N PLAN.json`).
//
// A plan holds what every part of a partitioned pack would otherwise find out for itself by
// walking the whole input: the ordered listing (after the write-time shuffle), the listing
// problems, the classes, the options that decide the bytes (their fingerprint), the number of
// parts N and each part's item range. `kiln pack --plan PLAN.json --part I OUT` then packs part
// I from the plan's listing without listing the input again (one walk of a shared file system
// instead of N), and N comes from the plan (for engines that cannot tell it). A part packed from
// a plan carries the same partition record (tools/pack/partition.h) as one packed without, so
// `kiln merge` takes either.
//
// The file format (JSON, a format tag and a version, a checksum) is specified byte by byte in
// tools/pack/plan_format.md; tests/data/plan/ holds a golden plan.
//
// Thread safety: plain data and stateless functions.
#ifndef KILN_TOOLS_PACK_PACK_PLAN_H_
#define KILN_TOOLS_PACK_PACK_PLAN_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "formats/status.h"
#include "tools/pack/partition.h"
#include "tools/pack/rejection.h"
#include "tools/sources/source_listing.h"

namespace kiln {

// plan_format.md, "Top level": the value of `format` and the version this build writes and
// reads (a plan of a newer version is refused as NotSupported).
inline constexpr char kPlanFormatTag[] = "kiln-plan";
inline constexpr uint32_t kPlanVersion = 1;
// plan_format.md, "Checksum": the key of the plan checksum.
inline constexpr char kPlanChecksumKey[] = "plan_xxh3_64";

// One planned item: the listing's item (key, label, list-file line) and its size when planned.
struct PlanItem {
  std::string key;    // as SourceItem::key: relative to `root` (or absolute, list files)
  int64_t label = 0;  // as SourceItem::label (after --classes pinned it)
  // File size in bytes when the plan was made; nullopt when the file could not be found then
  // (the part rejects it as a plain pack would: "not found").
  std::optional<uint64_t> bytes;
  uint64_t line = 0;  // 1-based list-file line; 0 for ImageFolder
};

struct PackPlan {
  std::string input;   // the input as `kiln plan` was given it; parts record it as source.input
  std::string kind;    // "imagefolder" or "list"
  std::string root;    // what keys are relative to: the folder, or the list file's root
  uint32_t parts = 1;  // N
  std::vector<std::string> classes;   // label -> name, as the parts' manifests hold them
  std::string class_map;              // where pinned classes came from ("" = not pinned)
  std::string options_json = "{}";    // PartOptionsJson of the planned options
  std::vector<PlanItem> items;        // in write order (after --shuffle-seed)
  std::vector<Rejection> problems;    // listing problems, in listing order
  std::vector<SkippedFile> skipped;   // ImageFolder: files skipped for their name
  std::vector<std::string> warnings;  // the listing's warnings
  uint64_t listing_xxh3_64 = 0;       // ListingHash(items, problems)
  uint64_t options_xxh3_64 = 0;       // OptionsHash(options_json, classes)

  // The item range of part `index` (PartRange over items.size()). Precondition: index < parts.
  ItemRange Range(uint32_t index) const;
  // The file system path of item `i`: `root` joined with the key by one '/' (a list file's
  // absolute key, or any key when `root` is empty, as written), as the listing made it.
  std::string ItemPath(size_t i) const;
};

// Returns the partition record's listing hash (PartitionRecord::listing_xxh3_64): XXH3-64 over
// each item's key, '\0', decimal label, '\n', then each listing problem's path, '\0', decimal
// line, '\0', reason, '\n'. Keys, not paths, so nodes may mount the input at different places.
uint64_t ListingHash(const std::vector<SourceItem>& items, const std::vector<Rejection>& problems);
uint64_t ListingHash(const std::vector<PlanItem>& items, const std::vector<Rejection>& problems);

// Returns the partition record's options hash (PartitionRecord::options_xxh3_64): XXH3-64 of
// `options_json`, '\n', then each class name followed by '\0'.
uint64_t OptionsHash(const std::string& options_json, const std::vector<std::string>& classes);

// One option whose value differs between two option objects (PartOptionsJson's form): its flag
// and both values as JSON text ("not recorded" when `then` lacks the flag).
struct OptionDifference {
  std::string flag;
  std::string then;
  std::string now;
};
// Returns the flags of `now_json` whose values differ in `then_json`, in `now_json`'s order
// (empty when either is not a JSON object). Used by --resume (tools/pack/pack_journal.h) and by
// `kiln pack --plan`.
std::vector<OptionDifference> OptionDifferences(const std::string& then_json,
                                                const std::string& now_json);

// Returns the plan file's text (plan_format.md): one top-level member a line, one item,
// problem or skipped file a line, `plan_xxh3_64` last. Errors: InvalidArgument when a string
// that must be UTF-8 (a reason, a warning, a class name) is not.
Result<std::string> PackPlanText(const PackPlan& plan);

// Parses and checks a plan file's text; `origin` (the file's path) starts every message.
// Errors: Corruption for text that is not JSON ("... is not JSON: ... at byte N"), not a kiln
// plan (no "format": "kiln-plan": another file), a checksum mismatch (damaged or edited), a
// missing or mistyped field (named, with the item's index), ranges that do not follow
// PartRange, or a listing or options hash that does not match the content; NotSupported for a
// plan of a newer version.
Result<PackPlan> ParsePackPlan(const std::string& text, const std::string& origin);

// Writes the plan to `path` atomically (`path`.tmp, fsync, rename, fsync of the directory).
// Errors: as PackPlanText; IOError naming the path.
Status WritePackPlan(const std::string& path, const PackPlan& plan);

// Reads and checks the plan at `path`. Errors: NotFound / IOError naming the path; as
// ParsePackPlan, with the path as origin.
Result<PackPlan> ReadPackPlan(const std::string& path);

}  // namespace kiln

#endif  // KILN_TOOLS_PACK_PACK_PLAN_H_
