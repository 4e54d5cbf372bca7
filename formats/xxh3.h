// The one include for xxHash inside formats/: XXH3-64 (RecordChecksum, whole-file and index
// hashes) through xxHash's runtime CPU dispatch where the library has it, so hashing runs with
// AVX2 or AVX-512 on CPUs that have them instead of the SSE2 code a generic x86-64 build of
// libxxhash uses (about 2x on AVX-512; the values are the same, xxHash guarantees it).
//
// KILN_HAVE_XXH3_DISPATCH is set by formats/CMakeLists.txt when the linked libxxhash exports
// XXH3_64bits_dispatch (Debian's libxxhash.so does; its libxxhash.a does not). Then
// <xxh_x86dispatch.h> redefines XXH3_64bits, XXH3_64bits_withSeed and XXH3_64bits_update as the
// dispatching versions; the streaming state and XXH3_64bits_reset_withSeed are shared.
#ifndef KILN_FORMATS_XXH3_H_
#define KILN_FORMATS_XXH3_H_

#include <xxhash.h>
#if KILN_HAVE_XXH3_DISPATCH
#include <xxh_x86dispatch.h>
#endif

#endif  // KILN_FORMATS_XXH3_H_
