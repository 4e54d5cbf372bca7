// formats/hdf5/: the HDF5 backend. hdf5_format.{h,md} (this header: the layout's constants),
// hdf5_file.h (the library wrapper), hdf5_inspector.h (layout inspection), hdf5_writer.h,
// hdf5_dataset.h, hdf5_verifier.h, hdf5_backend.cc (its row of formats/format_registry.h) and the
// Zstandard filter plugin h5z_zstd_plugin.c.
//
// Constants of kiln's HDF5 layout (formats/hdf5/hdf5_format.md; the section cited with each).
//
// A kiln HDF5 dataset is one file, data.h5, beside kiln.json: `images` (contiguous, or chunked
// one sample per chunk with Zstandard filter 32015), `labels`, `keys`, `checksums`, and the
// manifest as a string attribute. The layout is read back either through the HDF5 library (h5py,
// h5dump) or, by kiln, through raw byte offsets found once at open (formats/hdf5/hdf5_inspector.h).
// Thread safety: constants only.
#ifndef KILN_FORMATS_HDF5_FORMAT_H_
#define KILN_FORMATS_HDF5_FORMAT_H_

#include <cstdint>

namespace kiln {

// Section 1: the one data file in the dataset directory.
inline constexpr char kHdf5DataFileName[] = "data.h5";

// Section 2: datasets in the root group.
inline constexpr char kHdf5ImagesName[] = "images";        // [N, H, W, C] or [N, C, H, W]
inline constexpr char kHdf5LabelsName[] = "labels";        // [N] int64 LE
inline constexpr char kHdf5KeysName[] = "keys";            // [N] fixed-length UTF-8, NUL-padded
inline constexpr char kHdf5ChecksumsName[] = "checksums";  // [N] uint64 LE, RecordChecksum

// Section 3: attributes.
inline constexpr char kHdf5ManifestAttr[] = "kiln_manifest";     // root: kiln.json minus files
inline constexpr char kHdf5VersionAttr[] = "kiln_hdf5_version";  // root: int32, kHdf5Version
inline constexpr char kHdf5LayoutAttr[] = "layout";              // images: "HWC" or "CHW"
inline constexpr char kHdf5KeysChecksumAttr[] = "xxh3_64";       // keys: uint64, from version 2
// Version 2 added the keys checksum; version 1 files (without it) are still read.
inline constexpr int32_t kHdf5Version = 2;
inline constexpr int32_t kHdf5OldestVersion = 1;

// Section 4: the registered HDF5 filter id of Zstandard (HDF Group's filter registry), and the
// bit of a chunk's filter mask that says the chunk skipped it (stored raw).
inline constexpr uint32_t kHdf5ZstdFilterId = 32015;
inline constexpr uint32_t kHdf5ChunkSkippedZstd = 1;

// Section 2: a key longer than this many bytes is refused (keys are fixed-width: the width is the
// longest key, and every sample pays for it).
inline constexpr uint32_t kHdf5MaxKeyBytes = 4096;

}  // namespace kiln

#endif  // KILN_FORMATS_HDF5_FORMAT_H_
