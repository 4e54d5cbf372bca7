// The one include for xxHash inside formats/, and kiln's two XXH3-64 entry points: Xxh3 (one
// shot, seeded) and Xxh3Update (streaming). Both give xxHash's XXH3-64 values, whatever the code
// path (xxHash guarantees the same result from every implementation).
//
// Large inputs go through xxHash's runtime CPU dispatch where the linked libxxhash has it, so
// they hash with AVX2 or AVX-512 instead of the SSE2 code a generic x86-64 build of the library
// uses: 20 -> 44 GB/s per core here for 16 KiB to 150 KB inputs. Small inputs (a 28x28 record, a
// 56-byte header) keep the plain code: on this machine the AVX-512 path made the loader ~30%
// slower on 784-byte records (BENCHMARKS.md, "Copy and checksum in one pass"), although it is
// faster in isolation; wide vector code lowers the core's clock for everything around it.
//
// KILN_HAVE_XXH3_DISPATCH is set by formats/CMakeLists.txt when the linked libxxhash exports
// XXH3_64bits_dispatch (Debian's libxxhash.so does; its libxxhash.a does not).
// Thread safety: pure functions; a streaming state belongs to one thread.
#ifndef KILN_FORMATS_XXH3_H_
#define KILN_FORMATS_XXH3_H_

#include <xxhash.h>

#include <cstddef>
#include <cstdint>
#if KILN_HAVE_XXH3_DISPATCH
#define XXH_DISPATCH_DISABLE_REPLACE 1  // kiln chooses per call, below
#include <xxh_x86dispatch.h>
#endif

namespace kiln {

// Inputs of at least this many bytes use the dispatched (AVX2/AVX-512) code.
inline constexpr size_t kXxh3DispatchMinBytes = 16 * 1024;

// XXH3-64 of `size` bytes with `seed` (XXH3_64bits_withSeed; seed 0 is plain XXH3_64bits).
inline uint64_t Xxh3(const void* data, size_t size, uint64_t seed = 0) {
#if KILN_HAVE_XXH3_DISPATCH
  if (size >= kXxh3DispatchMinBytes) return XXH3_64bits_withSeed_dispatch(data, size, seed);
#endif
  return XXH3_64bits_withSeed(data, size, seed);
}

// XXH3_64bits_update; callers stream large inputs (files, record blocks), so it always
// dispatches when it can.
inline void Xxh3Update(XXH3_state_t* state, const void* data, size_t size) {
#if KILN_HAVE_XXH3_DISPATCH
  XXH3_64bits_update_dispatch(state, data, size);
#else
  XXH3_64bits_update(state, data, size);
#endif
}

}  // namespace kiln

#endif  // KILN_FORMATS_XXH3_H_
