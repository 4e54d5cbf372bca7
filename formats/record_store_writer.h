// kiln::RecordStoreWriter: the interface through which DatasetWriter hands records to a storage
// backend (shards, LMDB, HDF5) that writes them into the staging directory
// (formats/dataset_writer.h). The staging, manifest and rename logic stays in DatasetWriter; a
// backend only stores records in order and reports the data files it wrote. Backends are
// created through the format registry (formats/format_registry.h).
// Thread safety: none; one thread drives a writer.
#ifndef KILN_FORMATS_RECORD_STORE_WRITER_H_
#define KILN_FORMATS_RECORD_STORE_WRITER_H_

#include <cstdint>
#include <vector>

#include "formats/data_file_info.h"
#include "formats/manifest.h"
#include "formats/record_codec.h"
#include "formats/status.h"

namespace kiln {

class RecordStoreWriter {
 public:
  virtual ~RecordStoreWriter() = default;

  // Stores the next record (sample index = records added before it). Errors: IOError naming the
  // file (no space left, ...), InvalidArgument for a record the backend cannot hold.
  virtual Status Add(const EncodedRecord& record) = 0;

  // Returns the bytes written so far (an estimate while writes are buffered).
  virtual uint64_t bytes_written() const = 0;

  // Returns the data files already complete under their final names, in order, before
  // Finish(). Backends that write one file complete it only in Finish() and return none (the
  // default); the shard backend returns every closed shard. The reference stays valid until the
  // next Add or Finish.
  virtual const std::vector<DataFileInfo>& finished_files() const {
    static const std::vector<DataFileInfo> kNone;
    return kNone;
  }

  // Closes the open data file, if any, so that the next record starts a new one, for backends
  // that write several (shards: `kiln pack --of N` ends a shard at each part's range). Default:
  // nothing to do (one file per dataset). Errors: IOError naming the file.
  virtual Status CloseShard() { return Status::Ok(); }

  // Receives the dataset's manifest (every field but `files`, which describes the files Finish
  // returns) just before Finish(), for backends that keep a copy inside their file (HDF5).
  // Default: ignores it.
  virtual void SetManifest(const Manifest& manifest) { (void)manifest; }

  // Makes every record durable, closes the files and returns them all (size and whole-file
  // XXH3-64 computed after closing) for the manifest. Errors: IOError naming the file.
  virtual Result<std::vector<DataFileInfo>> Finish() = 0;
};

}  // namespace kiln

#endif  // KILN_FORMATS_RECORD_STORE_WRITER_H_
