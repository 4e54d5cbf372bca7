#include "formats/manifest.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "formats/byte_coding.h"
#include "formats/codec.h"
#include "formats/file_util.h"
#include "formats/xxh3.h"

namespace kiln {

using nlohmann::ordered_json;

namespace {
// XXH3-64 of the canonical form of `doc` (an object): sorted keys, compact, without the checksum
// key. nlohmann::json (std::map) sorts keys; its dump() escapes only what JSON requires and
// prints each number the way it was parsed (integers exactly, doubles in their shortest
// round-trip form), so parsing and dumping a manifest again gives the same bytes.
// Parses exactly 16 hex digits (as HexDigest writes them) into `*value`.
bool ParseHexDigest(const std::string& hex, uint64_t* value) {
  if (hex.size() != 16 || hex.find_first_not_of("0123456789abcdefABCDEF") != std::string::npos) {
    return false;
  }
  *value = std::strtoull(hex.c_str(), nullptr, 16);
  return true;
}

uint64_t CanonicalChecksum(const ordered_json& doc) {
  nlohmann::json canonical = nlohmann::json::parse(doc.dump());
  canonical.erase(kManifestChecksumKey);
  const std::string bytes = canonical.dump();
  return Xxh3(bytes.data(), bytes.size());
}
}  // namespace

std::optional<ManifestPart> PartOfPartitionedPack(const Manifest& manifest) {
  const ordered_json source = ordered_json::parse(manifest.source_json, nullptr, false);
  if (!source.is_object()) return std::nullopt;
  const auto record = source.find("partition");
  if (record == source.end() || !record->is_object()) return std::nullopt;
  const auto index = record->find("index");
  const auto count = record->find("count");
  if (index == record->end() || count == record->end() || !index->is_number_unsigned() ||
      !count->is_number_unsigned() || count->get<uint64_t>() > UINT32_MAX ||
      index->get<uint64_t>() >= count->get<uint64_t>()) {
    return std::nullopt;
  }
  return ManifestPart{index->get<uint32_t>(), count->get<uint32_t>()};
}

std::vector<std::string> SourceListFiles(const Manifest& manifest) {
  std::vector<std::string> out;
  const ordered_json source = ordered_json::parse(manifest.source_json, nullptr, false);
  if (!source.is_object()) return out;
  for (const char* key : {"rejected_list", "skipped_list"}) {
    const auto it = source.find(key);
    if (it == source.end() || !it->is_string()) continue;
    const std::string name = it->get<std::string>();
    // As data file names (FromJson): inside the directory; never the manifest or a data file.
    if (name.empty() || name.find('/') != std::string::npos || name[0] == '.' ||
        name == kManifestFileName) {
      continue;
    }
    bool data_file = false;
    for (const DataFileInfo& f : manifest.files) data_file = data_file || f.file == name;
    if (!data_file && std::find(out.begin(), out.end(), name) == out.end()) out.push_back(name);
  }
  return out;
}

Result<uint64_t> ManifestChecksum(const std::string& text, const std::string& origin) {
  ordered_json j = ordered_json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return Status::Corruption("not a JSON object").WithFile(origin);
  }
  try {
    return CanonicalChecksum(j);
  } catch (const std::exception& e) {  // invalid UTF-8 in a string
    return Status::Corruption(e.what()).WithFile(origin);
  }
}

std::string Manifest::ToJson() const {
  ordered_json j;
  j["kiln_manifest_version"] = jpeg_records() ? kManifestVersion : kManifestVersionWithoutRecords;
  j["format"] = format;
  j["tool"] = tool;
  j["schema"] = {{"dtype", DTypeName(schema.dtype)}, {"layout", LayoutName(schema.layout)},
                 {"height", schema.height},          {"width", schema.width},
                 {"channels", schema.channels},      {"sample_bytes", schema.sample_bytes()}};
  j["samples"] = samples;
  j["classes"] = classes;
  j["compression"] = compression;
  if (jpeg_records()) {
    j["records"] = {{"codec", "jpeg"}, {"quality", jpeg_quality}, {"max_side", jpeg_max_side}};
  }
  j["record_alignment"] = record_alignment;
  j["shuffle_seed"] = shuffle_seed ? ordered_json(*shuffle_seed) : ordered_json(nullptr);
  // Invalid JSON here is a caller bug; it is stored as null rather than thrown (Write reports it).
  j["preprocessing"] = ordered_json::parse(preprocessing_json, nullptr, false);
  j["source"] = ordered_json::parse(source_json, nullptr, false);
  if (j["preprocessing"].is_discarded()) j["preprocessing"] = nullptr;
  if (j["source"].is_discarded()) j["source"] = nullptr;
  ordered_json shards = ordered_json::array();
  for (const DataFileInfo& f : files) {
    ordered_json entry = {{"file", f.file},
                          {"samples", f.samples},
                          {"bytes", f.bytes},
                          {"xxh3_64", HexDigest(f.xxh3_64)}};
    if (f.index_xxh3_64) entry["index_xxh3_64"] = HexDigest(*f.index_xxh3_64);
    shards.push_back(std::move(entry));
  }
  j["files"] = shards;
  j[kManifestChecksumKey] = HexDigest(CanonicalChecksum(j));
  return j.dump(2) + "\n";
}

namespace {
// Returns `j[key]` when it is an unsigned integer no larger than `max`; otherwise throws (caught
// in FromJson). nlohmann's get<uint32_t>() would accept 2.5, wrap -3 and convert floats with
// undefined behaviour.
uint64_t UnsignedField(const ordered_json& j, const char* key, uint64_t max) {
  const ordered_json& v = j.at(key);
  if (!v.is_number_unsigned() || v.get<uint64_t>() > max) {
    throw std::out_of_range(std::string("field '") + key + "' must be an unsigned integer <= " +
                            std::to_string(max) + ", not " + v.dump());
  }
  return v.get<uint64_t>();
}

// Manifest::FromJson without its origin: the errors are the bare reasons.
Result<Manifest> ParseManifest(const std::string& text) {
  ordered_json j = ordered_json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return Status::Corruption("not a JSON object");
  }
  // nlohmann reports type errors by exception; they stay inside this function.
  try {
    const int version = j.at("kiln_manifest_version").get<int>();
    if (version < kOldestManifestVersion || version > kManifestVersion) {
      return Status::NotSupported("manifest version " + std::to_string(version) +
                                  " (this kiln reads " + std::to_string(kOldestManifestVersion) +
                                  " to " + std::to_string(kManifestVersion) + ")");
    }
    Manifest m;
    m.format = j.at("format").get<std::string>();
    m.tool = j.value("tool", "");
    const ordered_json& s = j.at("schema");
    Result<DType> dtype = ParseDType(s.at("dtype").get<std::string>());
    if (!dtype.ok()) return Status::Corruption(dtype.status().message());
    m.schema.dtype = *dtype;
    Result<Layout> layout = ParseLayout(s.at("layout").get<std::string>());
    if (!layout.ok()) return Status::Corruption(layout.status().message());
    m.schema.layout = *layout;
    m.schema.height = static_cast<uint32_t>(UnsignedField(s, "height", UINT32_MAX));
    m.schema.width = static_cast<uint32_t>(UnsignedField(s, "width", UINT32_MAX));
    m.schema.channels = static_cast<uint32_t>(UnsignedField(s, "channels", UINT32_MAX));
    Status schema_ok = m.schema.Validate();
    if (!schema_ok.ok()) return Status::Corruption(schema_ok.message());
    m.samples = UnsignedField(j, "samples", UINT64_MAX);
    m.classes = j.at("classes").get<std::vector<std::string>>();
    m.compression = j.value("compression", "none");
    if (j.contains("records")) {
      const ordered_json& r = j.at("records");
      if (version < 3) {
        return Status::Corruption("field 'records' needs manifest version 3, not " +
                                  std::to_string(version));
      }
      if (r.at("codec").get<std::string>() != "jpeg") {
        return Status::Corruption("records.codec '" + r.at("codec").get<std::string>() +
                                  "' is not jpeg");
      }
      m.jpeg_quality = static_cast<int>(UnsignedField(r, "quality", 100));
      m.jpeg_max_side = static_cast<uint32_t>(UnsignedField(r, "max_side", kMaxJpegSide));
      if (m.jpeg_quality < 1 || m.jpeg_max_side == 0) {
        return Status::Corruption("records: quality must be in [1, 100] and max_side >= 1");
      }
      if (m.format != "shards") {
        return Status::Corruption("JPEG records are stored in the shards format only, not " +
                                  m.format);
      }
      if (m.schema.dtype != DType::kUint8 || m.schema.layout != Layout::kHWC ||
          m.schema.height != m.jpeg_max_side || m.schema.width != m.jpeg_max_side) {
        return Status::Corruption("JPEG records need a uint8 HWC schema of max_side x max_side");
      }
    } else if (version >= 3) {
      return Status::Corruption("manifest version 3 without 'records'");
    }
    m.record_alignment = static_cast<uint32_t>(
        j.contains("record_alignment") ? UnsignedField(j, "record_alignment", UINT32_MAX)
                                       : kDefaultRecordAlignment);
    if (j.contains("shuffle_seed") && !j["shuffle_seed"].is_null()) {
      m.shuffle_seed = UnsignedField(j, "shuffle_seed", UINT64_MAX);
    }
    m.preprocessing_json = j.value("preprocessing", ordered_json::object()).dump();
    m.source_json = j.value("source", ordered_json::object()).dump();
    for (const ordered_json& f : j.at("files")) {
      DataFileInfo info;
      info.file = f.at("file").get<std::string>();
      if (info.file.empty() || info.file.find('/') != std::string::npos || info.file[0] == '.') {
        return Status::Corruption("file name '" + info.file +
                                  "' must be a plain name inside the dataset directory");
      }
      info.samples = UnsignedField(f, "samples", UINT64_MAX);
      info.bytes = UnsignedField(f, "bytes", UINT64_MAX);
      const std::string hex = f.at("xxh3_64").get<std::string>();
      if (!ParseHexDigest(hex, &info.xxh3_64)) {
        return Status::Corruption("bad xxh3_64 '" + hex + "' for " + info.file);
      }
      if (f.contains("index_xxh3_64")) {
        const std::string index_hex = f.at("index_xxh3_64").get<std::string>();
        uint64_t index_hash = 0;
        if (!ParseHexDigest(index_hex, &index_hash)) {
          return Status::Corruption("bad index_xxh3_64 '" + index_hex + "' for " + info.file);
        }
        info.index_xxh3_64 = index_hash;
      }
      m.files.push_back(std::move(info));
    }
    // The checksum is checked after the fields, so that a malformed field is reported by name;
    // it then catches every change that still parses (a class name, a count, a hash).
    if (!j.contains(kManifestChecksumKey) && version >= 2) {
      return Status::Corruption(std::string("no ") + kManifestChecksumKey +
                                " (required from manifest version 2)");
    }
    if (j.contains(kManifestChecksumKey)) {
      const std::string stored = j.at(kManifestChecksumKey).get<std::string>();
      const uint64_t computed = CanonicalChecksum(j);
      if (stored != HexDigest(computed)) {
        return Status::Corruption("manifest checksum mismatch (stored " + stored + ", computed " +
                                  HexDigest(computed) + "): the manifest was damaged or edited");
      }
    }
    return m;
  } catch (const std::exception& e) {
    return Status::Corruption(e.what());
  }
}

}  // namespace

// Every error names `origin` once, as its location (reason() is the bare reason).
Result<Manifest> Manifest::FromJson(const std::string& text, const std::string& origin) {
  Result<Manifest> manifest = ParseManifest(text);
  if (!manifest.ok()) return manifest.status().WithFile(origin);
  return manifest;
}

Result<Manifest> Manifest::Read(const std::string& dir) {
  const std::string path = dir + "/" + kManifestFileName;
  Result<std::string> text = ReadFileToString(path);
  if (!text.ok()) {
    if (text.status().code() == StatusCode::kNotFound) {
      if (::access(dir.c_str(), F_OK) != 0) {
        return Status::NotFound("dataset directory " + dir + " does not exist");
      }
      return Status::NotFound(dir + " is not a complete kiln dataset: no " + kManifestFileName);
    }
    return text.status();
  }
  Result<Manifest> manifest = FromJson(*text, path);
  if (!manifest.ok()) return manifest.status().WithLocation({path});
  return manifest;
}

Status Manifest::Write(const std::string& dir) const {
  for (const std::string* text : {&preprocessing_json, &source_json}) {
    if (ordered_json::parse(*text, nullptr, false).is_discarded()) {
      return Status::InvalidArgument("manifest for " + dir + ": invalid JSON object '" +
                                     text->substr(0, 80) + "'");
    }
  }
  return WriteFileAtomically(dir + "/" + kManifestFileName, ToJson());
}

Status CheckSingleDataFile(const std::string& dir, const Manifest& manifest,
                           const std::string& file_name, const std::string& format) {
  if (manifest.files.size() != 1 || manifest.files[0].file != file_name) {
    return Status::Corruption(dir + "/" + kManifestFileName + ": an " + format +
                              " dataset lists exactly one file, " + file_name);
  }
  const std::string path = dir + "/" + file_name;
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) return Status::NotFound(path + ": no such file (dataset incomplete)");
    return Status::FromErrno("cannot stat", path, errno);
  }
  return CheckSizeAgainstManifest(path, static_cast<uint64_t>(st.st_size), manifest.files[0].bytes);
}

}  // namespace kiln
