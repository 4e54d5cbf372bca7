// kiln::PackJournal: the resume journal of `kiln pack --resume`.
//
// While a pack runs, the ordered writer stage rewrites `<output>.partial/progress.json` each
// time a shard closes: the fingerprint of everything that decides the output bytes (options and
// the ordered listing), how many listed items the finished shards and rejections cover, the
// finished shards (name, samples, bytes, XXH3-64 of the whole file) and the rejections so far.
// A resumed run loads the journal only when its fingerprint equals the new run's, so the
// finished dataset is byte-identical to an uninterrupted one
// (tests/tools/interrupted_pack_test.sh).
// Thread safety: free functions without shared state.
#ifndef KILN_TOOLS_PACK_PACK_JOURNAL_H_
#define KILN_TOOLS_PACK_PACK_JOURNAL_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "formats/manifest.h"
#include "tools/pack/pack_options.h"
#include "tools/pack/rejection.h"
#include "tools/sources/source_listing.h"

namespace kiln {

// The journal's file name inside the staging directory.
inline constexpr char kPackJournalFileName[] = "progress.json";

// What a journal promises; loaded only when its fingerprint matches.
struct PackJournal {
  uint64_t items_done = 0;   // listed items (after any shuffle) covered by `files`
  uint64_t input_bytes = 0;  // image bytes read for the samples in `files`
  std::vector<DataFileInfo> files;
  std::vector<Rejection> rejections;
  // What the run was asked for, so a resume with other options can name the one that differs:
  // every option that decides the bytes, keyed by its flag (a JSON object), and the number of
  // listed inputs (items and listing problems). Empty and 0 in journals of older versions.
  std::string options_json;
  uint64_t listed_inputs = 0;
};

// Returns the XXH3-64 of everything that decides the output bytes: format, schema,
// preprocessing, decode options, compression, shard size, shuffle seed, classes, then every
// item (path, key, label) and listing problem in order. A resumed run must match it exactly.
uint64_t PackFingerprint(const PackOptions& options, const std::vector<std::string>& classes,
                         const std::vector<SourceItem>& items,
                         const std::vector<Rejection>& problems);

// Returns the journal as one JSON object (fingerprint as 16 hex digits, items_done,
// input_bytes, files, rejections).
std::string PackJournalJson(uint64_t fingerprint, const PackJournal& journal);

// Reads `<staging>/progress.json`. Returns an empty optional, with the reason in `why`, when
// there is nothing usable to resume: no journal, unreadable JSON, or another fingerprint; then
// `why` names each option that differs between the journal and `options_json` (this run's, as
// PackJournal::options_json) with both values ("--size was \"64x64\", now \"48x48\""), else the
// listed counts when `listed_inputs` differs, else says the listing or classes changed.
std::optional<PackJournal> ReadPackJournal(const std::string& staging, uint64_t fingerprint,
                                           const std::string& options_json, uint64_t listed_inputs,
                                           std::string* why);

}  // namespace kiln

#endif  // KILN_TOOLS_PACK_PACK_JOURNAL_H_
