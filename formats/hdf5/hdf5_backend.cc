// The hdf5 row of the format registry (formats/format_registry.h).
#include "formats/format_registry.h"
#include "formats/hdf5/hdf5_dataset.h"
#include "formats/hdf5/hdf5_verifier.h"
#include "formats/hdf5/hdf5_writer.h"

namespace kiln {

StorageFormat Hdf5StorageFormat() {
  StorageFormat row;
  row.name = "hdf5";
  row.description = "one HDF5 file, readable by h5py (formats/hdf5/hdf5_format.md)";
  row.compiled_in = true;
  row.open = [](const std::string& dir, Manifest manifest) -> Result<std::unique_ptr<Dataset>> {
    KILN_ASSIGN_OR_RETURN(std::unique_ptr<Hdf5Dataset> ds,
                          Hdf5Dataset::Open(dir, std::move(manifest)));
    return std::unique_ptr<Dataset>(std::move(ds));
  };
  row.create_writer =
      [](const std::string& dir,
         const StoreWriterOptions& options) -> Result<std::unique_ptr<RecordStoreWriter>> {
    KILN_ASSIGN_OR_RETURN(std::unique_ptr<Hdf5Writer> w, Hdf5Writer::Create(dir, options.schema));
    return std::unique_ptr<RecordStoreWriter>(std::move(w));
  };
  row.verify = [](const std::string& dir, const Manifest* manifest, const VerifyOptions& options,
                  VerifyReport* report) {
    if (manifest != nullptr) VerifyHdf5Dataset(dir, *manifest, options, report);
  };
  return row;
}

}  // namespace kiln
