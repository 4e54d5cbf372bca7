#include "formats/format_registry.h"

namespace kiln {

// Each backend's row, defined beside its code.
StorageFormat ShardsStorageFormat();
#if KILN_HAVE_LMDB
StorageFormat LmdbStorageFormat();
#endif
#if KILN_HAVE_HDF5
StorageFormat Hdf5StorageFormat();
#endif

#if !KILN_HAVE_LMDB || !KILN_HAVE_HDF5
namespace {

StorageFormat Missing(const char* name, const char* description, const char* missing) {
  StorageFormat row;
  row.name = name;
  row.description = description;
  row.missing = missing;
  return row;
}

}  // namespace
#endif

const std::vector<StorageFormat>& StorageFormats() {
  static const std::vector<StorageFormat> rows = {
    ShardsStorageFormat(),
#if KILN_HAVE_LMDB
    LmdbStorageFormat(),
#else
    Missing("lmdb", "one LMDB environment (formats/lmdb/lmdb_format.md)",
            "this kiln build has no LMDB support (rebuild with liblmdb-dev installed and "
            "KILN_WITH_LMDB not OFF)"),
#endif
#if KILN_HAVE_HDF5
    Hdf5StorageFormat(),
#else
    Missing("hdf5", "one HDF5 file, readable by h5py (formats/hdf5/hdf5_format.md)",
            "this kiln build has no HDF5 support (rebuild with libhdf5-dev installed and "
            "KILN_WITH_HDF5 not OFF)"),
#endif
  };
  return rows;
}

const StorageFormat* FindStorageFormat(std::string_view name) {
  for (const StorageFormat& row : StorageFormats()) {
    if (name == row.name) return &row;
  }
  return nullptr;
}

std::vector<std::string> StorageFormatNames(bool compiled_only) {
  std::vector<std::string> names;
  for (const StorageFormat& row : StorageFormats()) {
    if (row.compiled_in || !compiled_only) names.emplace_back(row.name);
  }
  return names;
}

std::string StorageFormatNamesText() {
  const std::vector<std::string> names = StorageFormatNames(false);
  std::string text;
  for (size_t i = 0; i < names.size(); ++i) {
    text += (i == 0 ? "" : i + 1 == names.size() ? " or " : ", ") + names[i];
  }
  return text;
}

bool IsFormatSupported(const std::string& format) {
  const StorageFormat* row = FindStorageFormat(format);
  return row != nullptr && row->compiled_in;
}

bool HasSelfContainedFiles(std::string_view format) {
  const StorageFormat* row = FindStorageFormat(format);
  return row != nullptr && row->self_contained_files;
}

bool CanResumeFormat(std::string_view format) {
  const StorageFormat* row = FindStorageFormat(format);
  return row != nullptr && row->compiled_in && row->resume_writer != nullptr;
}

std::string ResumeNotSupportedMessage() {
  std::vector<std::string> names;
  for (const StorageFormat& f : StorageFormats()) {
    if (CanResumeFormat(f.name)) names.push_back(f.name);
  }
  std::string text;
  for (size_t i = 0; i < names.size(); ++i) {
    text += (i == 0 ? "" : i + 1 == names.size() ? " or " : ", ") + names[i];
  }
  return "resuming is implemented for the " + text +
         (names.size() == 1 ? " format only" : " formats only");
}

}  // namespace kiln
