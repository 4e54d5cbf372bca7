#include "tools/cli/cli_parsing.h"

#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <memory>
#include <sstream>
#include <vector>

#include "formats/dataset.h"
#include "formats/manifest.h"

namespace kiln {

namespace {

bool ParseUint(const std::string& text, uint64_t* value) {
  if (text.empty() || !std::isdigit(static_cast<unsigned char>(text[0]))) return false;
  char* end = nullptr;
  errno = 0;
  *value = std::strtoull(text.c_str(), &end, 10);
  return *end == '\0' && errno == 0;
}

Status ParsePair(const std::string& text, const char* what, uint32_t* a, uint32_t* b,
                 bool single_allowed) {
  const size_t x = text.find_first_of("xX");
  uint64_t first = 0, second = 0;
  const bool ok =
      x == std::string::npos
          ? single_allowed && ParseUint(text, &first) && (second = first, true)
          : ParseUint(text.substr(0, x), &first) && ParseUint(text.substr(x + 1), &second);
  if (!ok || first == 0 || second == 0 || first > 65535 || second > 65535) {
    return Status::InvalidArgument(std::string(what) + " '" + text + "' must be " +
                                   (single_allowed ? "N or " : "") +
                                   "AxB with integers in [1, 65535]");
  }
  *a = static_cast<uint32_t>(first);
  *b = static_cast<uint32_t>(second);
  return Status::Ok();
}

}  // namespace

Status ParseImageSize(const std::string& text, uint32_t* height, uint32_t* width) {
  return ParsePair(text, "--size", height, width, /*single_allowed=*/true);
}

Status ParseGrid(const std::string& text, uint32_t* rows, uint32_t* columns) {
  return ParsePair(text, "--grid", rows, columns, /*single_allowed=*/false);
}

Result<uint64_t> ParseByteSize(const std::string& text) {
  size_t digits = 0;
  while (digits < text.size() && std::isdigit(static_cast<unsigned char>(text[digits]))) ++digits;
  uint64_t value = 0;
  const std::string suffix = text.substr(digits);
  uint64_t unit = 0;
  if (suffix.empty() || suffix == "B") unit = 1;
  if (suffix == "K" || suffix == "KiB") unit = uint64_t{1} << 10;
  if (suffix == "M" || suffix == "MiB") unit = uint64_t{1} << 20;
  if (suffix == "G" || suffix == "GiB") unit = uint64_t{1} << 30;
  if (suffix == "T" || suffix == "TiB") unit = uint64_t{1} << 40;
  if (!ParseUint(text.substr(0, digits), &value) || unit == 0) {
    return Status::InvalidArgument("size '" + text +
                                   "' must be a whole number with an optional B, KiB, MiB, GiB "
                                   "or TiB suffix (powers of 1024)");
  }
  if (value > kMaxByteSize / unit) {
    return Status::InvalidArgument("size '" + text + "' is larger than 1 PiB");
  }
  return value * unit;
}

Status ParseChannelValues(const std::string& flag, const std::string& text,
                          std::array<float, 3>* values) {
  const Status bad = Status::InvalidArgument(flag + " '" + text +
                                             "' must be 1 or 3 comma-separated finite numbers");
  std::vector<float> parsed;
  std::stringstream in(text);
  std::string part;
  while (std::getline(in, part, ',')) {
    char* end = nullptr;
    errno = 0;
    const float v = std::strtof(part.c_str(), &end);
    // strtof also reads "nan", "inf" and out-of-range numbers (as inf, with ERANGE).
    if (part.empty() || *end != '\0' || !std::isfinite(v) || errno == ERANGE) return bad;
    parsed.push_back(v);
  }
  if (parsed.size() == 1) parsed.assign(3, parsed[0]);
  if (parsed.size() != 3) return bad;
  *values = {parsed[0], parsed[1], parsed[2]};
  return Status::Ok();
}

Status ParsePackFlags(const std::string& size, uint32_t resize, const std::string& crop,
                      uint32_t channels, const std::string& layout, const std::string& dtype,
                      const std::string& mean, const std::string& std_dev,
                      const std::string& shard_size, const std::string& compress,
                      PackOptions* options) {
  PreprocessOptions& p = options->preprocess;
  KILN_RETURN_IF_ERROR(ParseImageSize(size, &p.schema.height, &p.schema.width));
  p.schema.channels = channels;
  KILN_ASSIGN_OR_RETURN(p.schema.layout, ParseLayout(layout));
  KILN_ASSIGN_OR_RETURN(p.schema.dtype, ParseDType(dtype));
  p.resize_shorter = resize;
  if (!ParseCropMode(crop, &p.crop)) {
    return Status::InvalidArgument("--crop " + crop + " must be center or none");
  }
  if (!mean.empty()) KILN_RETURN_IF_ERROR(ParseChannelValues("--mean", mean, &p.mean));
  if (!std_dev.empty()) KILN_RETURN_IF_ERROR(ParseChannelValues("--std", std_dev, &p.std));
  if (channels == 1 && (p.mean[1] != p.mean[0] || p.mean[2] != p.mean[0] || p.std[1] != p.std[0] ||
                        p.std[2] != p.std[0])) {
    return Status::InvalidArgument("--channels 1 takes one --mean and one --std value");
  }
  if ((!mean.empty() || !std_dev.empty()) && p.schema.dtype == DType::kUint8) {
    return Status::InvalidArgument(
        "--mean and --std apply to float16 and float32 output only; "
        "uint8 samples are stored unnormalised");
  }
  Result<uint64_t> shard_bytes = ParseByteSize(shard_size);
  if (!shard_bytes.ok()) return shard_bytes.status().WithContext("--shard-size");
  // The writer's range (formats/dataset_writer.h), checked here to name the flag as typed.
  if (*shard_bytes < kMinShardSizeBytes || *shard_bytes > kMaxShardSizeBytes) {
    return Status::InvalidArgument("--shard-size " + shard_size +
                                   ": a shard must be between 1KiB and 1TiB");
  }
  options->shard_size_bytes = *shard_bytes;
  KILN_ASSIGN_OR_RETURN(options->compression, Compression::Parse(compress));
  return Status::Ok();
}

Result<Manifest> ReadDatasetManifest(const std::string& dir) {
  if (Dataset::IsUrl(dir)) {  // no local manifest to read: the remote opener fetches it
    KILN_ASSIGN_OR_RETURN(std::unique_ptr<Dataset> dataset, Dataset::Open(dir));
    return dataset->manifest();
  }
  return Manifest::Read(dir);
}

Result<uint64_t> CountSamples(const std::string& dir) {
  KILN_ASSIGN_OR_RETURN(Manifest m, ReadDatasetManifest(dir));
  return m.samples;
}

}  // namespace kiln
