// The floor under kiln's per-sample read cost: copies fixed-size records picked at random from
// a file, on N threads, with the same software prefetch distance as the reader (a payload 4
// samples ahead), from the file's shared mapping and from an anonymous copy of it (optionally
// on transparent huge pages). No index, checksum, batch slots or consumer: what memory and
// address translation alone allow. BENCHMARKS.md, "Goals", note 3.
//
//   random_record_copy FILE RECORD_BYTES [THREADS=2] [huge]
//
// Prints records/s for each source, twice, then the process's AnonHugePages.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s FILE RECORD_BYTES [THREADS] [huge]\n", argv[0]);
    return 2;
  }
  const size_t record = std::strtoull(argv[2], nullptr, 10);
  const int threads = argc > 3 ? std::atoi(argv[3]) : 2;
  const bool huge = argc > 4 && std::string(argv[4]) == "huge";
  const int fd = ::open(argv[1], O_RDONLY);
  struct stat st;
  if (fd < 0 || ::fstat(fd, &st) != 0 || record == 0 || threads < 1 ||
      static_cast<size_t>(st.st_size) < record) {
    std::fprintf(stderr, "cannot use %s with records of %zu bytes\n", argv[1], record);
    return 1;
  }
  const size_t size = static_cast<size_t>(st.st_size);
  const auto* mapped =
      static_cast<const uint8_t*>(::mmap(nullptr, size, PROT_READ, MAP_SHARED, fd, 0));
  const size_t page = size_t{2} << 20;  // 2 MiB alignment so THP can back the copy
  const size_t length = (size + page - 1) / page * page;
  auto* raw = static_cast<uint8_t*>(
      ::mmap(nullptr, length + page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  if (mapped == MAP_FAILED || raw == MAP_FAILED) {
    std::perror("mmap");
    return 1;
  }
  auto* copy =
      reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(raw) + page - 1) / page * page);
  if (huge) ::madvise(copy, length, MADV_HUGEPAGE);
  std::memcpy(copy, mapped, size);
  const size_t records = size / record;
  const size_t total = 20000000;
  for (int round = 0; round < 2; ++round) {
    for (const uint8_t* base : {mapped, static_cast<const uint8_t*>(copy)}) {
      const auto start = std::chrono::steady_clock::now();
      std::vector<std::thread> pool;
      for (int t = 0; t < threads; ++t) {
        pool.emplace_back([&, t] {
          std::mt19937_64 rng(static_cast<uint64_t>(t));
          std::vector<uint8_t> batch(record * 256);
          size_t ahead[4];
          for (size_t& a : ahead) a = rng() % records;
          for (size_t k = 0; k < total / static_cast<size_t>(threads); ++k) {
            const size_t now = ahead[k % 4];
            ahead[k % 4] = rng() % records;
            __builtin_prefetch(base + ahead[k % 4] * record);
            std::memcpy(&batch[(k % 256) * record], base + now * record, record);
          }
        });
      }
      for (std::thread& t : pool) t.join();
      const double s =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      std::printf(
          "%s: %.2f M records/s\n",
          base == mapped ? "file mapping" : (huge ? "anonymous copy, THP" : "anonymous copy"),
          static_cast<double>(total) / s / 1e6);
    }
  }
  if (FILE* f = std::fopen("/proc/self/smaps_rollup", "r")) {
    char line[256];
    while (std::fgets(line, sizeof line, f) != nullptr) {
      if (std::strstr(line, "AnonHuge") != nullptr) std::fputs(line, stdout);
    }
    std::fclose(f);
  }
  return 0;
}
