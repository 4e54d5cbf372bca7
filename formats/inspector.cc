#include "formats/inspector.h"

#include <nlohmann/json.hpp>
#include <sstream>

#include "formats/dataset.h"

namespace kiln {

Result<std::string> Inspect(const std::string& dir, bool json) {
  KILN_ASSIGN_OR_RETURN(std::unique_ptr<Dataset> dataset, Dataset::Open(dir));
  const Manifest& m = dataset->manifest();
  uint64_t bytes = 0;
  for (const DataFileInfo& f : m.files) bytes += f.bytes;
  nlohmann::ordered_json j;
  j["dir"] = dir;
  j["format"] = m.format;
  j["tool"] = m.tool;
  j["samples"] = m.samples;
  j["shape"] = m.schema.layout == Layout::kHWC
                   ? nlohmann::ordered_json{m.schema.height, m.schema.width, m.schema.channels}
                   : nlohmann::ordered_json{m.schema.channels, m.schema.height, m.schema.width};
  j["dtype"] = DTypeName(m.schema.dtype);
  j["layout"] = LayoutName(m.schema.layout);
  j["sample_bytes"] = m.schema.sample_bytes();
  j["classes"] = m.classes;
  j["compression"] = m.compression;
  if (m.jpeg_records()) {
    j["records"] = {{"codec", "jpeg"}, {"quality", m.jpeg_quality}, {"max_side", m.jpeg_max_side}};
  }
  j["shuffle_seed"] =
      m.shuffle_seed ? nlohmann::ordered_json(*m.shuffle_seed) : nlohmann::ordered_json(nullptr);
  j["bytes"] = bytes;
  j["preprocessing"] = nlohmann::ordered_json::parse(m.preprocessing_json);
  j["source"] = nlohmann::ordered_json::parse(m.source_json);
  nlohmann::ordered_json files = nlohmann::ordered_json::array();
  for (const DataFileInfo& f : m.files) {
    files.push_back({{"file", f.file}, {"samples", f.samples}, {"bytes", f.bytes}});
  }
  j["files"] = files;
  if (json) return j.dump();

  std::ostringstream out;
  out << "dataset       " << dir << "\n"
      << "format        " << m.format << " (" << m.files.size() << " files, " << bytes
      << " bytes, written by " << m.tool << ")\n"
      << "samples       " << m.samples << "\n"
      << "sample        " << m.schema.ShapeString() << " " << DTypeName(m.schema.dtype) << " "
      << LayoutName(m.schema.layout) << ", " << m.schema.sample_bytes() << " bytes\n"
      << "compression   " << m.compression << "\n"
      << (m.jpeg_records() ? "records       JPEG (quality " + std::to_string(m.jpeg_quality) +
                                 "), each image at most " + std::to_string(m.jpeg_max_side) +
                                 " pixels per side: the sample shape above is that bound\n"
                           : std::string())
      << "shuffle seed  "
      << (m.shuffle_seed ? std::to_string(*m.shuffle_seed) : "none (source order)") << "\n"
      << "classes       ";
  if (m.classes.empty()) {
    // Packed from labels that are not class ids 0..99999 (a list file's, a tar shard's or a
    // TFRecord's): the integers are stored as given, without names.
    out << "none: labels are the input's integers, without class names";
  } else {
    out << m.classes.size() << ":";
  }
  for (size_t i = 0; i < m.classes.size(); ++i) out << (i ? ", " : " ") << i << "=" << m.classes[i];
  out << "\npreprocessing " << j["preprocessing"].dump() << "\n"
      << "source        " << j["source"].dump() << "\n";
  for (const DataFileInfo& f : m.files) {
    out << "  " << f.file << "  " << f.samples << " samples  " << f.bytes << " bytes\n";
  }
  return out.str();
}

}  // namespace kiln
