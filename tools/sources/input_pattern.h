// kiln::ExpandInputFiles and kiln::IsInputOfKind: converter inputs that are a set of files of
// one kind (WebDataset tar shards, TFRecord files), named by one file, a directory of them, or a
// pattern as dataset users write them ("shards/{000000..000099}.tar", "data/*.tfrecord",
// "data/train-{00000..01023}-of-01024").
//
// A kind is a predicate on a file name (e.g. "ends in .tar"). The expansion is the same for
// every kind, so `kiln pack` reads patterns one way whatever the files hold
// (tools/sources/pack_inputs.md).
//
// Thread safety: both functions are reentrant; they read the file system without locking it.
#ifndef KILN_TOOLS_SOURCES_INPUT_PATTERN_H_
#define KILN_TOOLS_SOURCES_INPUT_PATTERN_H_

#include <string>
#include <string_view>
#include <vector>

#include "formats/status.h"

namespace kiln {

// Says whether a file name (the whole path or its basename) names a file of one kind.
using InputNamePredicate = bool (*)(std::string_view name);

// Returns true when `s` holds a pattern character: '{', '*', '?' or '['.
bool HasInputPattern(std::string_view s);

// Returns true when `input` names files of the kind `is_kind` recognises: a name it accepts; a
// pattern (HasInputPattern) that it accepts as written; or a directory that holds such files
// and no sub-directory.
bool IsInputOfKind(const std::string& input, InputNamePredicate is_kind);

// Returns the files of `input`, in order: the file itself; a directory's files whose basename
// `is_kind` accepts (sorted by bytes); or a pattern's expansions, brace expressions first
// ("{000000..000099}" counts with the width of the wider bound when either bound has a leading
// zero or both have one width, "{a,b}" alternates, nested and repeated braces allowed), then
// each result globbed (glob(3), sorted) when it holds '*', '?' or '['. `what` names one file
// in messages ("tar shard", "TFRecord file"). With `require_all` false, a name that a brace
// expression gives (no glob) is returned whether or not it exists: a part of a pack split by
// file checks only its own files, which may be all that its node can see.
// Errors: NotFound naming a file that does not exist (require_all), a glob that matches nothing or
// a directory without such files; InvalidArgument for an unbalanced brace, a range that is not
// {N..M}, or a range over 10,000,000 names.
Result<std::vector<std::string>> ExpandInputFiles(const std::string& input,
                                                  InputNamePredicate is_kind,
                                                  const std::string& what, bool require_all = true);

}  // namespace kiln

#endif  // KILN_TOOLS_SOURCES_INPUT_PATTERN_H_
