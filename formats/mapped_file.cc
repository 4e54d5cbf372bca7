#include "formats/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
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
    return Status::IOError("cannot map " + path + ": not a regular file").WithLocation({path});
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

Result<std::unique_ptr<MappedFile>> MappedFile::Anonymous(std::string name, uint64_t size) {
  const uint8_t* data = nullptr;
  if (size > 0) {
    void* p = ::mmap(nullptr, size, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) {
      return Status::FromErrno("cannot reserve " + std::to_string(size) + " bytes of memory for",
                               name, errno);
    }
    data = static_cast<const uint8_t*>(p);
  }
  return std::unique_ptr<MappedFile>(new MappedFile(std::move(name), data, size, true));
}

MappedFile::~MappedFile() {
  if (data_ != nullptr) ::munmap(const_cast<uint8_t*>(data_), size_);
}

void MappedFile::AdviseWillNeed() const {
  if (data_ != nullptr) ::madvise(const_cast<uint8_t*>(data_), size_, MADV_WILLNEED);
}

MappedRange MappedFile::RangeAt(uint64_t offset, uint64_t bytes) const {
  if (data_ == nullptr || offset >= size_) return {};
  return {data_ + offset, std::min(bytes, size_ - offset)};
}

namespace {
uint64_t PageBytes() {
  static const uint64_t page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
  return page;
}
}  // namespace

void AdviseWillNeed(MappedRange range) {
  if (range.empty()) return;
  // madvise wants a page-aligned start; a mapping starts on a page and covers whole pages, so
  // rounding out stays inside it.
  const uintptr_t page = PageBytes();
  const uintptr_t begin = reinterpret_cast<uintptr_t>(range.data) & ~(page - 1);
  const uintptr_t end = reinterpret_cast<uintptr_t>(range.data) + range.size;
  ::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_WILLNEED);
}

bool IsResident(MappedRange range, uint32_t max_pages) {
  if (range.empty()) return true;
  const uintptr_t page = PageBytes();
  const uintptr_t begin = reinterpret_cast<uintptr_t>(range.data) & ~(page - 1);
  const uintptr_t end = reinterpret_cast<uintptr_t>(range.data) + range.size;
  const uint64_t pages = std::min<uint64_t>((end - begin + page - 1) / page, max_pages);
  unsigned char vec[256];
  if (pages == 0 || pages > sizeof(vec)) return false;
  if (::mincore(reinterpret_cast<void*>(begin), pages * page, vec) != 0) return false;
  for (uint64_t p = 0; p < pages; ++p) {
    if ((vec[p] & 1) == 0) return false;
  }
  return true;
}

void MappedFile::Advise(AccessAdvice advice) const {
  if (data_ == nullptr) return;
  const int how = advice == AccessAdvice::kRandom       ? MADV_RANDOM
                  : advice == AccessAdvice::kSequential ? MADV_SEQUENTIAL
                                                        : MADV_NORMAL;
  ::madvise(const_cast<uint8_t*>(data_), size_, how);
}

void MappedFile::AdviseRandom() const {
  if (data_ != nullptr) ::madvise(const_cast<uint8_t*>(data_), size_, MADV_RANDOM);
}

}  // namespace kiln
