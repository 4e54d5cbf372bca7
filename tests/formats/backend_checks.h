// Checks that the storage backends' tests share (tests/formats/conformance_test.cc and the
// per-backend tests under tests/formats/), so that each backend is held to the same words:
//  - kiln::testing::RunAtOnce: a function in many forked processes released at one instant.
//  - kiln::testing::ExpectDamagedRecordNamed: a record with a flipped byte is named, at its file,
//    record index and byte offset, by kiln verify and by the reader.
// Thread safety: none needed; call them on the test's thread.
#ifndef KILN_TESTS_FORMATS_BACKEND_CHECKS_H_
#define KILN_TESTS_FORMATS_BACKEND_CHECKS_H_

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "formats/dataset.h"
#include "formats/record_codec.h"
#include "formats/status.h"
#include "formats/verifier.h"

namespace kiln::testing {

// Runs `child` (returning an exit code) in `count` forked processes released at the same instant
// (a pipe barrier) and returns their exit codes, 128 + the signal for a process killed by one.
template <typename F>
std::vector<int> RunAtOnce(int count, F child) {
  int barrier[2];
  EXPECT_EQ(::pipe(barrier), 0);
  std::vector<pid_t> pids;
  for (int p = 0; p < count; ++p) {
    const pid_t pid = ::fork();
    if (pid == 0) {
      ::close(barrier[1]);
      char c;
      (void)!::read(barrier[0], &c, 1);  // returns when the parent closes its end
      ::_exit(child());
    }
    EXPECT_GE(pid, 0) << "fork failed";
    if (pid > 0) pids.push_back(pid);
  }
  ::close(barrier[0]);
  ::close(barrier[1]);
  std::vector<int> codes;
  for (pid_t pid : pids) {
    int status = 0;
    ::waitpid(pid, &status, 0);
    codes.push_back(WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status));
  }
  return codes;
}

// For the dataset in `dir` of `samples` samples whose record `record` (not 0), stored from byte
// `offset` of the data file `file` (a path), has one byte flipped where its checksum covers it:
// expects kiln verify to check every record and report a "checksum mismatch" of that record at
// that file and offset, and the whole-file hash; and the reader to open the dataset (the size
// still matches) and fail ReadSample(record) with Corruption located at {file, record, offset}
// whose reason starts "checksum mismatch", while record - 1 still reads. Returns the verify
// problem and the reader's error, for the backend's own checks of their words.
struct DamagedRecordErrors {
  VerifyProblem problem;
  Status read;
};
inline DamagedRecordErrors ExpectDamagedRecordNamed(const std::string& dir, const std::string& file,
                                                    uint64_t samples, int64_t record,
                                                    int64_t offset) {
  DamagedRecordErrors out;
  const VerifyReport report = VerifyDataset(dir, VerifyOptions{});
  EXPECT_FALSE(report.ok());
  bool named = false, whole_file = false;
  for (const VerifyProblem& p : report.problems) {
    if (p.record == record && p.reason.find("checksum mismatch") != std::string::npos) {
      named = true;
      EXPECT_EQ(p.file, file);
      EXPECT_EQ(p.offset, offset);
      out.problem = p;
    }
    if (p.reason.find("whole-file hash") != std::string::npos) whole_file = true;
    EXPECT_TRUE(p.record == record || p.record == -1) << VerifyReportToText(report);
  }
  EXPECT_TRUE(named) << VerifyReportToText(report);
  EXPECT_TRUE(whole_file) << VerifyReportToText(report);
  EXPECT_EQ(report.records_checked, samples);

  Result<std::unique_ptr<Dataset>> ds = Dataset::Open(dir);
  EXPECT_TRUE(ds.ok()) << ds.status().ToString();
  if (!ds.ok()) return out;
  RecordDecoder decoder;
  std::vector<uint8_t> buf((*ds)->schema().sample_bytes());
  int64_t label = 0;
  out.read = (*ds)->ReadSample(static_cast<uint64_t>(record), &decoder, buf.data(), &label);
  EXPECT_EQ(out.read.code(), StatusCode::kCorruption) << out.read.ToString();
  EXPECT_EQ(out.read.location(), (ErrorLocation{file, record, offset}));
  EXPECT_EQ(out.read.reason().rfind("checksum mismatch", 0), 0u) << out.read.reason();
  EXPECT_TRUE(
      (*ds)->ReadSample(static_cast<uint64_t>(record) - 1, &decoder, buf.data(), &label).ok());
  return out;
}

}  // namespace kiln::testing

#endif  // KILN_TESTS_FORMATS_BACKEND_CHECKS_H_
