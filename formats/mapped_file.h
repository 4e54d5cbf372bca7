// kiln::MappedFile: a whole file mapped read-only into memory, unmapped on destruction.
//
// Ownership: the MappedFile owns the mapping; views into data() stay valid until it is
// destroyed. A file that another process truncates while mapped makes later reads of the lost
// pages raise SIGBUS: kiln checks sizes at open (ShardReader) and documents this limitation.
// Thread safety: const methods are safe from any thread.
#ifndef KILN_FORMATS_MAPPED_FILE_H_
#define KILN_FORMATS_MAPPED_FILE_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "formats/status.h"

namespace kiln {

class MappedFile {
 public:
  // Maps `path` read-only. An empty file maps to size() == 0 and data() == nullptr.
  // Errors: NotFound, IOError naming the path and the system's reason.
  static Result<std::unique_ptr<MappedFile>> Open(const std::string& path);

  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const uint8_t* data() const { return data_; }
  uint64_t size() const { return size_; }  // bytes
  const std::string& path() const { return path_; }

  // Hints the kernel that the whole file will be read soon (madvise WILLNEED). Best effort.
  void AdviseWillNeed() const;
  // Hints random access (madvise RANDOM): no read-ahead past the touched pages. Best effort.
  void AdviseRandom() const;

 private:
  MappedFile(std::string path, const uint8_t* data, uint64_t size)
      : path_(std::move(path)), data_(data), size_(size) {}

  std::string path_;
  const uint8_t* data_;
  uint64_t size_;
};

}  // namespace kiln

#endif  // KILN_FORMATS_MAPPED_FILE_H_
