// CRC-32C (tools/sources/crc32c.h) against the published test vectors: RFC 3720 appendix B.4
// (iSCSI) and the check value of the CRC catalogue; the SSE4.2 and table paths agree on every
// length and alignment; TFRecord's mask round-trips.
#include "tools/sources/crc32c.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

namespace kiln {
namespace {

struct Vector {
  std::vector<uint8_t> bytes;
  uint32_t crc;
};

std::vector<Vector> PublishedVectors() {
  std::vector<Vector> v;
  v.push_back({std::vector<uint8_t>(32, 0x00), 0x8A9136AAu});  // RFC 3720 B.4: 32 bytes of zeros
  v.push_back({std::vector<uint8_t>(32, 0xFF), 0x62A8AB43u});  // 32 bytes of ones
  std::vector<uint8_t> up(32), down(32);
  for (int i = 0; i < 32; ++i) {
    up[i] = static_cast<uint8_t>(i);
    down[i] = static_cast<uint8_t>(31 - i);
  }
  v.push_back({up, 0x46DD794Eu});    // 32 incrementing bytes 00..1f
  v.push_back({down, 0x113FDB5Cu});  // 32 decrementing bytes 1f..00
  // RFC 3720 B.4: an iSCSI SCSI Read (10) command PDU.
  v.push_back({{0x01, 0xc0, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
                0x00, 0x00, 0x00, 0x00, 0x14, 0x00, 0x00, 0x00, 0x00, 0x00, 0x04, 0x00,
                0x00, 0x00, 0x00, 0x14, 0x00, 0x00, 0x00, 0x18, 0x28, 0x00, 0x00, 0x00,
                0x00, 0x00, 0x00, 0x00, 0x02, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00},
               0xD9963A56u});
  const std::string check = "123456789";  // the catalogue's check value
  v.push_back({std::vector<uint8_t>(check.begin(), check.end()), 0xE3069283u});
  v.push_back({{}, 0x00000000u});
  return v;
}

TEST(Crc32cTest, PublishedVectors) {
  for (const Vector& v : PublishedVectors()) {
    EXPECT_EQ(Crc32c(v.bytes.data(), v.bytes.size()), v.crc) << v.bytes.size() << " bytes";
    EXPECT_EQ(Crc32cExtendPortable(0, v.bytes.data(), v.bytes.size()), v.crc)
        << v.bytes.size() << " bytes";
  }
}

TEST(Crc32cTest, ExtendEqualsOneCall) {
  const std::string a = "The quick brown fox ", b = "jumps over the lazy dog";
  const std::string ab = a + b;
  EXPECT_EQ(Crc32cExtend(Crc32c(a.data(), a.size()), b.data(), b.size()),
            Crc32c(ab.data(), ab.size()));
  EXPECT_EQ(Crc32cExtendPortable(Crc32cExtendPortable(0, a.data(), a.size()), b.data(), b.size()),
            Crc32c(ab.data(), ab.size()));
}

// Every length 0..300 at every alignment 0..7, and a long buffer: the hardware path (where the
// CPU has SSE4.2) and the table path give the same result, so both are tested by the vectors.
TEST(Crc32cTest, HardwareAndTablePathsAgree) {
  std::mt19937 rng(7);
  std::vector<uint8_t> buf(1 << 20);
  for (uint8_t& b : buf) b = static_cast<uint8_t>(rng());
  for (size_t align = 0; align < 8; ++align) {
    for (size_t n = 0; n <= 300; ++n) {
      ASSERT_EQ(Crc32cExtend(0x12345678u, buf.data() + align, n),
                Crc32cExtendPortable(0x12345678u, buf.data() + align, n))
          << "align " << align << " length " << n;
    }
  }
  EXPECT_EQ(Crc32c(buf.data() + 3, buf.size() - 3),
            Crc32cExtendPortable(0, buf.data() + 3, buf.size() - 3));
  if (!Crc32cUsesHardware()) GTEST_SKIP() << "no SSE4.2 on this CPU: only the table path ran";
}

TEST(Crc32cTest, MaskRoundTripsAndMatchesTensorFlow) {
  for (uint32_t crc : {0u, 1u, 0xE3069283u, 0xFFFFFFFFu, 0x80000000u}) {
    EXPECT_EQ(UnmaskCrc32c(MaskCrc32c(crc)), crc);
    EXPECT_NE(MaskCrc32c(crc), crc);
  }
  // The length CRC of an empty record: the CRC-32C of 8 zero bytes (python3-crc32c: 0x8c28b28a).
  const uint8_t zeros[8] = {};
  EXPECT_EQ(Crc32c(zeros, 8), 0x8c28b28au);
  // Masked by Python (tests/tools/tfrecord_writer.py's masked_crc).
  EXPECT_EQ(MaskCrc32c(0x8c28b28au), 0x07980329u);
}

}  // namespace
}  // namespace kiln
