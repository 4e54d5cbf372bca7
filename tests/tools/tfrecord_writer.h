// Runs the independent TFRecord writer of the TFRecord tests (tests/tools/tfrecord_writer.py:
// python3-crc32c and python3-protobuf) from C++, so tfrecord_reader_test and tfrecord_source_test
// share one copy. Thread safety: none needed; call it on the test's thread.
#ifndef KILN_TESTS_TOOLS_TFRECORD_WRITER_H_
#define KILN_TESTS_TOOLS_TFRECORD_WRITER_H_

#include <gtest/gtest.h>

#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tests/test_util.h"

namespace kiln::testing {

// Writes `files` (the writer's SPEC: a list of {"path", "gzip", "records"}, see the script's
// docstring) to `dir`/spec.json, runs /usr/bin/python3 tests/tools/tfrecord_writer.py on it, and
// returns its output: {"files": [{"path", "offsets", "lengths"}, ...]}, each offset the byte
// offset of a record's length field. Fails the test when the writer exits non-zero; returns a
// discarded JSON value when its output does not parse.
inline nlohmann::json RunTFRecordWriter(const std::string& dir,
                                        const std::vector<nlohmann::json>& files) {
  const std::string writer = std::string(KILN_SOURCE_DIR) + "/tests/tools/tfrecord_writer.py";
  WriteFileString(dir + "/spec.json", nlohmann::json(files).dump());
  const std::string out = dir + "/written.json";
  const int rc = std::system(
      ("/usr/bin/python3 '" + writer + "' '" + dir + "/spec.json' > '" + out + "'").c_str());
  EXPECT_EQ(rc, 0) << writer << " failed on " << dir << "/spec.json";
  return nlohmann::json::parse(ReadFileString(out), nullptr, false);
}

}  // namespace kiln::testing

#endif  // KILN_TESTS_TOOLS_TFRECORD_WRITER_H_
