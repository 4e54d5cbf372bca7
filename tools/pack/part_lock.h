// kiln::PartLock: at most one process writes a given output or part.
//
// Users: `kiln pack` locks `OUT.partial.lock` for a plain pack in any format (also with
// --resume and --overwrite), `OUT.parts/part-IIIII-of-NNNNN.lock` for a part, and `kiln merge`
// locks `OUT.partial.lock` of its output, so a pack and a merge into one output exclude each
// other too. The holder writes "host H pid P since T" into the file, so that a second attempt
// can say who holds it.
//
// Two ways to hold it (LockMethod):
//  - flock (the default where the file system supports it): `flock(LOCK_EX | LOCK_NB)` on the
//    lock file, held for the whole run and released by the kernel when the process ends,
//    however it ends (a SIGKILLed part can be resumed at once). The file is left in place
//    afterwards by parts (removing it would let two later writers lock two different files;
//    `kiln merge` removes the lock files of the parts it joined); a plain pack removes it
//    while still holding it, and a new holder re-opens a file unlinked under it.
//  - lock file: where flock fails with ENOLCK, EOPNOTSUPP, ENOSYS or EINVAL (NFS without a
//    lock manager, some FUSE file systems), or when KILN_LOCK=file is set (for shared file
//    systems whose flock is local to each host), the lock is the existence of the lock file,
//    created atomically (written under a temporary name, then link()ed to its name, which fails
//    when it exists; this is atomic on NFS too) and removed at the end. Its text ends with
//    "(lock file)". A lock file left by a process that died is stale: it is broken (renamed
//    aside, checked to be the same file, removed) only when it names this host and its pid no
//    longer runs; one naming another host, or a pid that runs (possibly a reused pid), is
//    refused with its path, to be removed by hand once that writer is known to be gone.
// Both methods see each other: a flock holder refuses while the file names a live lock-file
// holder, a lock-file holder refuses while another process holds the file's flock.
//
// Limits: flock works between processes on one machine and, on shared file systems, only where
// the file system passes it on: NFS v4 (and v3 with lockd), Lustre mounted with `flock`, CephFS,
// GPFS; elsewhere set KILN_LOCK=file. Breaking a stale lock file races only with another
// process breaking the same one at the same moment; then one of them refuses.
// Thread safety: a PartLock is owned by one thread; distinct locks are independent.
#ifndef KILN_TOOLS_PACK_PART_LOCK_H_
#define KILN_TOOLS_PACK_PART_LOCK_H_

#include <memory>
#include <string>

#include "formats/status.h"

namespace kiln {

enum class LockMethod {
  kAuto,   // flock, or the lock file where the file system does not support flock
  kFlock,  // flock only: an error where it is not supported
  kFile,   // the lock file only
};

// The method of the environment: KILN_LOCK=file gives kFile, KILN_LOCK=flock kFlock, anything
// else (or unset) kAuto.
LockMethod LockMethodFromEnvironment();

class PartLock {
 public:
  // Creates (if missing) and locks `path`; `what` names the part in messages ("part 2 of 4").
  // Errors: IOError "<what> is being written by another process (host H pid P since T; lock
  // PATH)" when it is held (for a lock file, with how to remove it once that writer is gone);
  // IOError (NotFound for a missing directory) "cannot create the lock file PATH: <strerror>",
  // with location().file PATH, when it cannot be created: a read-only or unwritable directory,
  // a path under a file. IsHeldElsewhere tells the two apart.
  static Result<std::unique_ptr<PartLock>> Acquire(const std::string& path, const std::string& what,
                                                   LockMethod method = LockMethodFromEnvironment());
  // Returns OK when nobody holds the lock file `path` now (or it does not exist, or it is a
  // stale lock file), else the same IOError as Acquire. Takes and releases no lock file.
  static Status CheckFree(const std::string& path, const std::string& what);
  // True when `status`, an error of Acquire or CheckFree, says that another process holds the
  // lock (the others name the lock file in their location and are the file system's refusals).
  static bool IsHeldElsewhere(const Status& status);
  ~PartLock();  // releases the lock (a lock file: removes it, if it is still this one)
  PartLock(const PartLock&) = delete;
  PartLock& operator=(const PartLock&) = delete;

  // True when held as a lock file (LockMethod::kFile, or kAuto without flock support).
  bool is_lock_file() const { return fd_ < 0; }

 private:
  PartLock(int fd, std::string path, uint64_t dev, uint64_t ino)
      : fd_(fd), path_(std::move(path)), dev_(dev), ino_(ino) {}
  int fd_ = -1;                 // the flocked descriptor; -1 for a lock file
  std::string path_;            // the lock file (lock-file method)
  uint64_t dev_ = 0, ino_ = 0;  // identity of the lock file this process created
};

// The lock of a whole output OUTPUT, taken by a plain `kiln pack` into it and by `kiln merge`
// into it: a PartLock on OUTPUT.partial.lock held for the whole run, whose file is removed
// (while still locked, see PartLock::Acquire) when the OutputLock is destroyed, whatever the
// outcome. Thread safety: as PartLock.
class OutputLock {
 public:
  // Locks `output` (a path without trailing slashes). Errors: InvalidArgument with
  // PartLock::Acquire's message, "output OUTPUT is being written by another process (...)", when
  // another pack or merge holds it (exit 2); PartLock::Acquire's IOError with the context
  // "output OUTPUT cannot be written" when the lock file cannot be created: a read-only or
  // unwritable directory, a path under a file (exit 1).
  static Result<std::unique_ptr<OutputLock>> Acquire(const std::string& output);
  ~OutputLock();
  OutputLock(const OutputLock&) = delete;
  OutputLock& operator=(const OutputLock&) = delete;

 private:
  OutputLock(std::string path, std::unique_ptr<PartLock> lock)
      : path_(std::move(path)), lock_(std::move(lock)) {}
  std::string path_;  // OUTPUT.partial.lock
  std::unique_ptr<PartLock> lock_;
};

}  // namespace kiln

#endif  // KILN_TOOLS_PACK_PART_LOCK_H_
