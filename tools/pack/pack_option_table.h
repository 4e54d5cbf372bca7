// kiln::PackOptionTable: the one list of pack options (kiln::PackOptions,
// tools/pack/pack_options.h). Each row names an option the way every place that lists pack
// options spells it: its kiln.pack() keyword (the kiln._tools.PackOptions property), its
// `kiln pack` flag, its key in the part options JSON (PartOptionsJson: the partition record of a
// part, the plan file, the resume journal's options) and its key in the manifest's
// preprocessing object (PreprocessingJson), and whether the resume fingerprint
// (tools/pack/pack_journal.h: PackFingerprint) hashes it. The JSON functions below are built by
// walking the table, and the defaults of `kiln pack`, kiln.pack() and kiln._tools.PackOptions are
// DefaultPackOptions(): tests/tools/pack_option_table_test.cc and python/tests/test_options.py
// check every other list (the flags' defaults, PackFingerprint, the Python keywords, the type
// stub) against the table.
//
// Not in the table: the options that say which part or plan a run packs and where the class
// ids come from (part_index, part_count, plan, class_map: `kiln pack --part/--of/--plan/
// --classes`, recorded in the partition record's own fields), and `cancel`.
//
// Adding an option: add its field to PackOptions with its default, then one row in
// pack_option_table.cc (append it: the order of the rows is the order of the JSON keys, and
// the golden files in tests/data hold those bytes); a row that decides the output bytes must
// also be hashed by PackFingerprint. Then the flag (tools/cli/cli_pack_flags.cc), the property
// (python/kiln_tools_module.cc), the keyword (python/kiln/__init__.py) and the stub
// (python/kiln/_tools.pyi); the tests named above say which of them is missing.
//
// Thread safety: the table is immutable; every function is reentrant.
#ifndef KILN_TOOLS_PACK_PACK_OPTION_TABLE_H_
#define KILN_TOOLS_PACK_PACK_OPTION_TABLE_H_

#include <string>
#include <vector>

#include "tools/pack/pack_options.h"

namespace kiln {

// One pack option. Every name is a static string; "" means the option has none.
struct PackOptionInfo {
  // The kiln.pack() keyword and kiln._tools.PackOptions property, e.g. "shard_size". "": the
  // option is not offered to Python.
  const char* name;
  // The `kiln pack` flag, e.g. "--shard-size". "": none (the positional INPUT and OUTPUT, or an
  // option without a flag).
  const char* flag;
  // The key in PartOptionsJson, e.g. "--shard-size". "": not recorded there, i.e. the option
  // does not decide which items are packed or their bytes (threads, overwrite ...).
  const char* part_key;
  // The key in the manifest's preprocessing object (PreprocessingJson), e.g. "max_pixels".
  // "": not there.
  const char* manifest_key;
  // True when PackFingerprint hashes the option, so that a --resume with another value starts
  // over. Every option with a part_key is, but --on-error (it decides whether a pack fails,
  // never the bytes of one that succeeds) and the TFRecord --feature-* flags.
  bool fingerprinted;
};

// Returns every row, in the order of PartOptionsJson's keys, then the options without one.
const std::vector<PackOptionInfo>& PackOptionTable();

// Returns the options of `kiln pack` with its flags' defaults: PackOptions{} with the schema
// 224 x 224, 3 channels (hwc, uint8). kiln._tools.PackOptions() starts from it too.
PackOptions DefaultPackOptions();

// Returns one JSON object holding every row's value in `options`, keyed by its name (its
// part_key when it has no name), in table order; each value as PartOptionsJson writes it
// ("--size": "224x224", "--shuffle-seed": null). For tests and messages.
std::string PackOptionValuesJson(const PackOptions& options);

// Returns the rows with a part_key and their values in `options` as one JSON object, in table
// order: every option that decides which items are packed and a record's bytes, keyed by its
// flag, for the partition record (a merge names the flag that differs between two parts), the
// plan file and the resume journal.
std::string PartOptionsJson(const PackOptions& options);

// Returns the manifest's preprocessing object (formats/manifest.h: Manifest::preprocessing_json):
// the rows with a manifest_key and their values, with the fixed "interpolation" and
// "decode_policy" descriptions, in the order the manifests in tests/data hold.
std::string PreprocessingJson(const PackOptions& options);

}  // namespace kiln

#endif  // KILN_TOOLS_PACK_PACK_OPTION_TABLE_H_
