// Read-time augmentation: random crop and horizontal flip, applied while a sample is copied
// from the dataset into its batch slot.
//
// The parameters of sample i in epoch e are a pure function of (seed, e, i), so an epoch's
// batches are byte-identical whatever the thread count, and a resumed run sees the same crops.
// Works on every dtype and layout: it moves whole elements and never changes values.
// Thread safety: stateless functions.
#ifndef KILN_READER_AUGMENTER_H_
#define KILN_READER_AUGMENTER_H_

#include <cstdint>

#include "formats/status.h"
#include "formats/tensor_schema.h"

namespace kiln {

struct AugmentOptions {
  // Output height and width of a random crop; 0 and 0 for no crop. Must not exceed the stored
  // size. Default 0 (off).
  uint32_t crop_height = 0;
  uint32_t crop_width = 0;
  // Mirror left-right with probability 1/2. Default false.
  bool flip = false;

  bool enabled() const { return crop_height != 0 || crop_width != 0 || flip; }
};

// The drawn parameters for one sample.
struct AugmentParams {
  uint32_t top = 0;   // first row of the crop in the stored sample
  uint32_t left = 0;  // first column of the crop
  bool flip = false;
};

// Returns the schema of augmented samples (the crop size, otherwise `stored`).
// Errors: InvalidArgument when only one crop size is set or the crop exceeds the stored size.
Result<TensorSchema> AugmentedSchema(const TensorSchema& stored, const AugmentOptions& options);

// Draws sample `sample`'s parameters for (seed, epoch): top uniform in [0, H - crop_height],
// left uniform in [0, W - crop_width], flip with probability 1/2.
AugmentParams DrawAugmentParams(const TensorSchema& stored, const AugmentOptions& options,
                                uint64_t seed, uint64_t epoch, uint64_t sample);

// Writes the crop of `in` (a sample of schema `stored`) at `params` to `out` (a sample of schema
// `out_schema` from AugmentedSchema), mirrored when params.flip.
void ApplyAugment(const uint8_t* in, const TensorSchema& stored, const AugmentParams& params,
                  const TensorSchema& out_schema, uint8_t* out);

}  // namespace kiln

#endif  // KILN_READER_AUGMENTER_H_
