// kiln::RenderSamples: draws packed samples as a PNG for `kiln show`, so people can look at
// what training will see rather than read numbers.
//
// Samples are turned back into 8-bit RGB: uint8 as stored; float16/float32 by undoing the
// recorded normalisation (v * std + mean) * 255, clamped. Small samples are enlarged with
// nearest-neighbour so each tile is at least 96 pixels high. Each tile carries its class name.
// Thread safety: reentrant.
#ifndef KILN_TOOLS_IMAGING_SAMPLE_RENDERER_H_
#define KILN_TOOLS_IMAGING_SAMPLE_RENDERER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "formats/status.h"
#include "reader/augmenter.h"

namespace kiln {

// Returns `count` sample indices spread evenly over [0, num_samples): i * num_samples / count.
std::vector<uint64_t> EvenlySpacedIndices(uint64_t num_samples, uint64_t count);

// Writes the samples `indices` of the dataset in `dir` as a grid with `columns` tiles per row,
// labelled with class names, to the PNG file `png_path`. Errors: as Dataset::Open and
// Dataset::ReadSample; OutOfRange for an index past the end; IOError when the PNG cannot be
// written.
Status RenderSamples(const std::string& dir, const std::vector<uint64_t>& indices, uint32_t columns,
                     const std::string& png_path);

// Writes `draws` augmented draws of sample `index`: draw e is what the loader gives for that
// sample in epoch e with `augment` and `seed` (DrawAugmentParams and ApplyAugment of
// reader/augmenter.h, the loader's own functions), captioned with its epoch (and "flip"), as a
// grid of `columns` tiles per row, to `png_path`. Errors: InvalidArgument when `augment` does
// nothing or is invalid for the dataset's schema (AugmentedSchema); OutOfRange for an index past
// the end; as Dataset::Open and ReadSample; IOError when the picture cannot be written.
Status RenderAugmentedDraws(const std::string& dir, uint64_t index, const AugmentOptions& augment,
                            uint64_t seed, uint32_t draws, uint32_t columns,
                            const std::string& png_path);

}  // namespace kiln

#endif  // KILN_TOOLS_IMAGING_SAMPLE_RENDERER_H_
