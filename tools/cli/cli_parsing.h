// Parsing of the `kiln` command line's compound values (sizes, lists, grids) into library
// options. Kept out of kiln_main.cc so it is unit-tested.
// Thread safety: stateless functions.
#ifndef KILN_TOOLS_CLI_CLI_PARSING_H_
#define KILN_TOOLS_CLI_CLI_PARSING_H_

#include <array>
#include <cstdint>
#include <string>

#include "formats/manifest.h"
#include "formats/status.h"
#include "tools/pack/pack_options.h"

namespace kiln {

// Parses "H" or "HxW" (positive integers). Errors: InvalidArgument naming the text.
Status ParseImageSize(const std::string& text, uint32_t* height, uint32_t* width);
// The largest byte count ParseByteSize accepts: 1 PiB.
inline constexpr uint64_t kMaxByteSize = uint64_t{1} << 50;
// The range of `kiln pack --shard-size` (the shard writer's, formats/dataset_writer.cc): 1 KiB to
// 1 TiB.
inline constexpr uint64_t kMinShardSizeBytes = uint64_t{1} << 10;
inline constexpr uint64_t kMaxShardSizeBytes = uint64_t{1} << 40;

// Parses a whole byte count with an optional suffix: B, KiB/K, MiB/M, GiB/G, TiB/T (powers of
// 1024), up to kMaxByteSize. Errors: InvalidArgument naming the text, saying which rule it breaks.
Result<uint64_t> ParseByteSize(const std::string& text);
// Parses "a" or "a,b,c" into three finite floats (one value is repeated). Errors:
// InvalidArgument naming `flag` and the text, also for nan, inf and out-of-range values.
Status ParseChannelValues(const std::string& flag, const std::string& text,
                          std::array<float, 3>* values);
// Parses "RxC" grid dimensions (each >= 1). Errors: InvalidArgument.
Status ParseGrid(const std::string& text, uint32_t* rows, uint32_t* columns);
// Fills `options` from the textual `kiln pack` flags. Errors: InvalidArgument naming the flag
// (--shard-size outside [kMinShardSizeBytes, kMaxShardSizeBytes] included).
Status ParsePackFlags(const std::string& size, uint32_t resize, const std::string& crop,
                      uint32_t channels, const std::string& layout, const std::string& dtype,
                      const std::string& mean, const std::string& std_dev,
                      const std::string& shard_size, const std::string& compress,
                      PackOptions* options);
// Returns the manifest of the dataset in `dir`: Manifest::Read for a directory; for a URL
// (s3://, http(s)://) the opened dataset's, by Dataset::Open, so the remote opener must be
// installed (EnableRemoteDatasets). Errors: as Manifest::Read, or as Dataset::Open for a URL.
Result<Manifest> ReadDatasetManifest(const std::string& dir);
// Returns the number of samples of the dataset in `dir` (ReadDatasetManifest). Errors: as it.
Result<uint64_t> CountSamples(const std::string& dir);

}  // namespace kiln

#endif  // KILN_TOOLS_CLI_CLI_PARSING_H_
