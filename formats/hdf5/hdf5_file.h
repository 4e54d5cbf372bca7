// kiln's wrapper around the HDF5 C library. Internal to formats/: only the HDF5 backend's .cc
// files include it (it includes hdf5.h).
//
// Every HDF5 call kiln makes happens while an Hdf5Lock is held: one process-wide mutex, because
// the library is not safe to call from several threads at once (and Debian's build serialises
// calls anyway). The lock also turns HDF5's automatic error printing off for the calling thread,
// so errors reach the caller once, as a Status naming the file (Hdf5Error), never as text on
// stderr. Readers take the lock only inside Hdf5File::Inspect, at open: after that kiln reads the
// mapped bytes at the offsets Inspect found, and fetch threads never call the library.
// Thread safety: Hdf5Lock serialises; Hdf5Id and Hdf5Layout are values owned by one thread.
#ifndef KILN_FORMATS_HDF5_FILE_H_
#define KILN_FORMATS_HDF5_FILE_H_

#include <hdf5.h>

#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "formats/shards/shard_format.h"
#include "formats/status.h"
#include "formats/tensor_schema.h"

namespace kiln {

// Holds the process-wide HDF5 mutex for its lifetime and turns automatic error printing off for
// this thread. Not reentrant: never construct one while the thread already holds one.
class Hdf5Lock {
 public:
  Hdf5Lock();
  Hdf5Lock(const Hdf5Lock&) = delete;
  Hdf5Lock& operator=(const Hdf5Lock&) = delete;

 private:
  std::lock_guard<std::mutex> lock_;
};

// An HDF5 identifier closed (with the function matching its kind) on destruction. Create and
// destroy it under an Hdf5Lock.
class Hdf5Id {
 public:
  Hdf5Id() = default;
  explicit Hdf5Id(hid_t id) : id_(id) {}
  ~Hdf5Id() { Reset(); }
  Hdf5Id(Hdf5Id&& other) noexcept : id_(other.id_) { other.id_ = H5I_INVALID_HID; }
  Hdf5Id& operator=(Hdf5Id&& other) noexcept {
    if (this != &other) {
      Reset();
      id_ = other.id_;
      other.id_ = H5I_INVALID_HID;
    }
    return *this;
  }
  Hdf5Id(const Hdf5Id&) = delete;
  Hdf5Id& operator=(const Hdf5Id&) = delete;

  hid_t get() const { return id_; }
  bool valid() const { return id_ >= 0; }
  // Closes the identifier now (H5Fclose, H5Dclose, ... by its type). Safe when invalid.
  void Reset();

 private:
  hid_t id_ = H5I_INVALID_HID;
};

// Returns "PATH: WHAT: <HDF5's messages, innermost last>" as an IOError (Corruption when HDF5
// says the file is truncated or its signature or metadata is bad) and clears the thread's error
// stack. A locking failure adds the cure (HDF5_USE_FILE_LOCKING=FALSE). Call under the lock.
Status Hdf5Error(std::string_view what, const std::string& path);

// Returns a new file type for a schema dtype: H5T_STD_U8LE, a 2-byte IEEE half (sign bit 15,
// exponent bits 10..14 with bias 15, mantissa bits 0..9: what h5py and numpy call float16) or
// H5T_IEEE_F32LE. Call under the lock; the Hdf5Id closes it.
Hdf5Id Hdf5FileType(DType dtype);

// Returns a file access property list with file locking off (H5Pset_file_locking: kiln never
// writes a finished file and needs no lock file, so read-only directories and many readers work)
// and strong close (H5Fclose closes the file descriptor even if an id leaked). Call under the
// lock. HDF5_USE_FILE_LOCKING in the environment still overrides it (HDF5's rule).
Hdf5Id Hdf5FileAccess();

// Where every sample's bytes lie in data.h5, found once by Hdf5File::Inspect and checked against
// the file size: afterwards samples are read from a mapping of the file at these offsets.
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

class Hdf5File {
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

#endif  // KILN_FORMATS_HDF5_FILE_H_
