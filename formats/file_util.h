// File utilities shared by every backend and the tools: atomic whole-file writes, whole-file
// reads, recursive removal, hex digests, and POSIX write/pread loops that retry on EINTR and
// short transfers.
// Thread safety: stateless functions; concurrent calls on different paths are safe.
#ifndef KILN_FORMATS_FILE_UTIL_H_
#define KILN_FORMATS_FILE_UTIL_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "formats/status.h"

namespace kiln {

// Returns the 16 lower-case hex digits of `value`.
std::string HexDigest(uint64_t value);

// Writes `contents` to `path` atomically: `<path>.tmp`, fsync, rename, fsync of the directory
// (best effort). Errors: IOError naming the path; nothing is left under `<path>.tmp`.
Status WriteFileAtomically(const std::string& path, const std::string& contents);
// Reads a whole file. Errors: NotFound, IOError naming the path.
Result<std::string> ReadFileToString(const std::string& path);

// Returns Ok when a file of `actual_bytes` matches the manifest's `expected_bytes`, else
// Corruption naming `path`, both sizes, and whether it was truncated or replaced/appended to.
Status CheckSizeAgainstManifest(const std::string& path, uint64_t actual_bytes,
                                uint64_t expected_bytes);

// True when `a` and `b` are the same directory or one lies inside the other, after making both
// absolute and resolving symbolic links, "." and ".." in the parts that exist (a path that does
// not exist yet is judged by its existing parent: "out" beside "." lies inside "."). False when
// either cannot be resolved.
bool PathsOverlap(const std::string& a, const std::string& b);

// For crash-consistency tests: when the environment variable KILN_FAULT_KILL_AT equals `point`,
// the process sends itself SIGKILL here (nothing is flushed or cleaned up, as in a preemption).
// The points: "dataset-rename" (DatasetWriter::Finish, the finished staging directory just
// before its rename to the output) and "merge-rename" (kiln merge, the same moment).
void KillHereForTest(const char* point);

// Removes `path` and everything below it. Errors: IOError naming the path.
Status RemoveTree(const std::string& path);

// Writes all `size` bytes of `data` to `fd` at its file offset, retrying on EINTR and short
// writes. `path` only names the file in errors: IOError "cannot write PATH: <strerror>".
Status WriteFully(int fd, const void* data, size_t size, const std::string& path);
// Reads exactly `size` bytes at byte `offset` of `fd` into `data` (pread), retrying on EINTR and
// short reads. Errors: IOError "cannot read PATH: <strerror>", or "cannot read PATH: unexpected
// end of file" when the file ends first.
Status PreadFully(int fd, void* data, size_t size, uint64_t offset, const std::string& path);
// Writes all `size` bytes of `data` at byte `offset` of `fd` (pwrite), retrying on EINTR and
// short writes. Errors: IOError "cannot write PATH: <strerror>" (location: PATH and the offset).
Status PwriteFully(int fd, const void* data, size_t size, uint64_t offset, const std::string& path);

}  // namespace kiln

#endif  // KILN_FORMATS_FILE_UTIL_H_
