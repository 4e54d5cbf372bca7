// kiln's wrapper around the HDF5 C library: the lock, identifiers closed on destruction, the
// translation of HDF5's error stack into a Status, and the file types and access properties kiln
// uses. Internal to formats/: only the HDF5 backend's .cc files include it (it includes hdf5.h).
// The layout inspector built on it is formats/hdf5/hdf5_inspector.h.
//
// Every HDF5 call kiln makes happens while an Hdf5Lock is held: one process-wide mutex, because
// the library is not safe to call from several threads at once (and Debian's build serialises
// calls anyway). The lock also turns HDF5's automatic error printing off for the calling thread,
// so errors reach the caller once, as a Status naming the file (Hdf5Error), never as text on
// stderr. Readers take the lock only inside Hdf5Inspector::Inspect (formats/hdf5/hdf5_inspector.h),
// at open: after that kiln reads the
// mapped bytes at the offsets Inspect found, and fetch threads never call the library.
// Thread safety: Hdf5Lock serialises; an Hdf5Id is a value owned by one thread.
#ifndef KILN_FORMATS_HDF5_FILE_H_
#define KILN_FORMATS_HDF5_FILE_H_

#include <hdf5.h>

#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>

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

}  // namespace kiln

#endif  // KILN_FORMATS_HDF5_FILE_H_
