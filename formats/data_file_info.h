// kiln::DataFileInfo: one data file of a dataset as the manifest records it (shard files, LMDB's
// data.mdb, HDF5's data.h5), whatever the storage backend.
// Thread safety: a plain value.
#ifndef KILN_FORMATS_DATA_FILE_INFO_H_
#define KILN_FORMATS_DATA_FILE_INFO_H_

#include <cstdint>
#include <optional>
#include <string>

namespace kiln {

struct DataFileInfo {
  std::string file;      // file name relative to the dataset directory
  uint64_t samples = 0;  // records in the file
  uint64_t bytes = 0;    // file size
  uint64_t xxh3_64 = 0;  // XXH3-64 (seed 0) of the whole file
  // Shards only: the footer's index checksum (shard_format.md sections 5 and 11), which
  // ShardDataset::Open compares with the file's so that a shard of another pack is refused at
  // open. Unset for LMDB and HDF5 files and in manifests written before the field existed.
  std::optional<uint64_t> index_xxh3_64;
};

}  // namespace kiln

#endif  // KILN_FORMATS_DATA_FILE_INFO_H_
