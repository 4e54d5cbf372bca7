// The lmdb row of the format registry (formats/format_registry.h).
#include "formats/format_registry.h"
#include "formats/lmdb/lmdb_dataset.h"
#include "formats/lmdb/lmdb_verifier.h"
#include "formats/lmdb/lmdb_writer.h"

namespace kiln {

StorageFormat LmdbStorageFormat() {
  StorageFormat row;
  row.name = "lmdb";
  row.description = "one LMDB environment (formats/lmdb/lmdb_format.md)";
  row.compiled_in = true;
  row.open = [](const std::string& dir, Manifest manifest) -> Result<std::unique_ptr<Dataset>> {
    KILN_ASSIGN_OR_RETURN(std::unique_ptr<LmdbDataset> ds,
                          LmdbDataset::Open(dir, std::move(manifest)));
    return std::unique_ptr<Dataset>(std::move(ds));
  };
  row.create_writer =
      [](const std::string& dir,
         const StoreWriterOptions& options) -> Result<std::unique_ptr<RecordStoreWriter>> {
    LmdbWriterOptions lo;
    if (options.lmdb_initial_map_bytes != 0) lo.initial_map_bytes = options.lmdb_initial_map_bytes;
    KILN_ASSIGN_OR_RETURN(std::unique_ptr<LmdbWriter> w, LmdbWriter::Create(dir, lo));
    return std::unique_ptr<RecordStoreWriter>(std::move(w));
  };
  row.verify = [](const std::string& dir, const Manifest* manifest, const VerifyOptions& options,
                  VerifyReport* report) {
    if (manifest != nullptr) VerifyLmdbDataset(dir, *manifest, options, report);
  };
  return row;
}

}  // namespace kiln
