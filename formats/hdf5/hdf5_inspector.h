// kiln::Hdf5Inspector: finds where every sample of a kiln HDF5 file (formats/hdf5/hdf5_format.md)
// lies, once, at open, so that samples are then read from a mapping of the file without calling
// the HDF5 library. Internal to formats/: the HDF5 backend's .cc files (and its tests) include it.
// It checks what the library reports against the format (names, types, shapes, storage, filters)
// and walks the chunk B-tree and attribute heaps itself, every offset checked against the file.
// Thread safety: Inspect takes the process-wide HDF5 lock (formats/hdf5/hdf5_file.h); Hdf5Layout
// is a value; CheckHdf5KeysChecksum calls no HDF5 and is thread-safe.
#ifndef KILN_FORMATS_HDF5_HDF5_INSPECTOR_H_
#define KILN_FORMATS_HDF5_HDF5_INSPECTOR_H_

#include <cstdint>
#include <string>
#include <vector>

#include "formats/codec.h"
#include "formats/status.h"
#include "formats/tensor_schema.h"

namespace kiln {

// Where every sample's bytes lie in data.h5, found once by Hdf5Inspector::Inspect and checked
// against the file size: afterwards samples are read from a mapping of the file at these offsets.
struct Hdf5Layout {
  uint64_t file_bytes = 0;  // size of data.h5 when inspected
  uint64_t samples = 0;
  uint64_t sample_bytes = 0;  // raw bytes of one sample (schema)
  // images: contiguous (images_offset is sample 0's first byte) or chunked (one chunk each).
  bool chunked = false;
  uint64_t images_offset = 0;
  struct Chunk {
    uint64_t offset = 0;  // bytes from the start of data.h5
    uint32_t size = 0;    // stored bytes
    Codec codec = Codec::kNone;
  };
  std::vector<Chunk> chunks;      // chunked only, one per sample
  uint64_t labels_offset = 0;     // int64 LE [N]
  uint64_t checksums_offset = 0;  // uint64 LE [N]
  uint64_t keys_offset = 0;       // key_width bytes per sample, NUL-padded
  uint32_t key_width = 0;
  int32_t version = 0;  // kiln_hdf5_version
  // XXH3-64 of the keys dataset's samples * key_width bytes (attribute `xxh3_64` of `keys`);
  // required from version 2, absent in version 1 files.
  bool has_keys_checksum = false;
  uint64_t keys_checksum = 0;
  std::string manifest_attr;  // the kiln_manifest attribute (only when asked for)

  // Returns sample i's stored bytes: offset in the file, size and codec. i < samples.
  Chunk Stored(uint64_t i) const {
    if (chunked) return chunks[i];
    return {images_offset + i * sample_bytes, static_cast<uint32_t>(sample_bytes), Codec::kNone};
  }
};

// Checks the keys checksum of a mapped data.h5 (`data` is its first byte, laid out as `layout`
// says): Ok when it matches, or when the file has none (version 1). O(samples * key width).
// Errors: Corruption "<path>: dataset 'keys' (offset O): keys checksum mismatch (stored X,
// computed Y)". Does not call HDF5; thread-safe.
Status CheckHdf5KeysChecksum(const Hdf5Layout& layout, const uint8_t* data,
                             const std::string& path);

class Hdf5Inspector {
 public:
  // Opens `path` read-only through HDF5 (no file locking), checks the layout of
  // formats/hdf5/hdf5_format.md against `schema` and `samples` (dataset names, types, shapes,
  // storage layouts, filters, every chunk present), finds the byte offset of every dataset (and of
  // every chunk, O(N), by walking the chunk B-tree itself: libhdf5 1.10 answers per-chunk
  // queries in O(N) each), checks each range lies inside the file, closes the file and returns
  // the offsets. Takes the HDF5 lock. Errors: NotFound; Corruption naming the path and the
  // dataset or sample; NotSupported (layouts kiln does not write: external storage, a user block,
  // other filters, a kiln_hdf5_version other than 1 or 2); IOError naming the path.
  static Result<Hdf5Layout> Inspect(const std::string& path, const TensorSchema& schema,
                                    uint64_t samples, bool read_manifest_attr);
};

}  // namespace kiln

#endif  // KILN_FORMATS_HDF5_HDF5_INSPECTOR_H_
