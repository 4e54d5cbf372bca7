// kiln::VerifyHdf5Dataset: the HDF5 part of VerifyDataset (formats/verifier.h). Internal to
// formats/: VerifyDataset calls it for manifests whose format is "hdf5".
//
// Checks: the manifest lists exactly data.h5 with the file's size and whole-file XXH3-64; the file
// opens through HDF5 and its datasets have the types, shapes and storage of
// formats/hdf5/hdf5_format.md for the manifest's schema and sample count (a truncated file fails
// here, naming data.h5); every dataset and chunk lies inside the file; the kiln_manifest attribute
// agrees with kiln.json on schema and samples; every sample's checksum holds and its label is one
// of the manifest's classes; deep mode also decodes each sample. Each problem names data.h5, the
// sample index (as `record`) and the byte offset of the sample's stored bytes.
// Thread safety: reentrant (HDF5 calls are serialised by kiln's HDF5 lock).
#ifndef KILN_FORMATS_HDF5_VERIFIER_H_
#define KILN_FORMATS_HDF5_VERIFIER_H_

#include <string>

#include "formats/manifest.h"
#include "formats/verifier.h"

namespace kiln {

// Appends the problems of the HDF5 dataset in `dir` (whose manifest is `manifest`) to `report`
// and updates its counters.
void VerifyHdf5Dataset(const std::string& dir, const Manifest& manifest,
                       const VerifyOptions& options, VerifyReport* report);

}  // namespace kiln

#endif  // KILN_FORMATS_HDF5_VERIFIER_H_
