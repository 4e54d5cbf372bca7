#include "formats/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

namespace kiln {

Result<std::unique_ptr<MappedFile>> MappedFile::Open(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Status::FromErrno("cannot open", path, errno);
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    return Status::FromErrno("cannot stat", path, err);
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return Status::IOError("cannot map " + path + ": not a regular file");
  }
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  const uint8_t* data = nullptr;
  if (size > 0) {
    void* p = ::mmap(nullptr, size, PROT_READ, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) {
      const int err = errno;
      ::close(fd);
      return Status::FromErrno("cannot mmap", path, err);
    }
    data = static_cast<const uint8_t*>(p);
  }
  ::close(fd);  // The mapping keeps the file alive.
  return std::unique_ptr<MappedFile>(new MappedFile(path, data, size));
}

MappedFile::~MappedFile() {
  if (data_ != nullptr) ::munmap(const_cast<uint8_t*>(data_), size_);
}

void MappedFile::AdviseWillNeed() const {
  if (data_ != nullptr) ::madvise(const_cast<uint8_t*>(data_), size_, MADV_WILLNEED);
}

void MappedFile::AdviseRandom() const {
  if (data_ != nullptr) ::madvise(const_cast<uint8_t*>(data_), size_, MADV_RANDOM);
}

}  // namespace kiln
