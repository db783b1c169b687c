// TensorBoard event files: CRC-32C against published vectors, the TFRecord framing, and a
// writer's file read back record by record. (TensorBoard's own reader loads a real run's files
// in tests/notebooks/check_plots_and_tensorboard.py.)
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "common/error.h"
#include "metrics/tensorboard_events.h"
#include "tensorboard.pb.h"

namespace gradbox::metrics {
namespace {

namespace fs = std::filesystem;

uint64_t read_le(const std::string& bytes, size_t at, int width) {
  uint64_t v = 0;
  for (int i = 0; i < width; ++i) v |= static_cast<uint64_t>(static_cast<unsigned char>(bytes[at + i])) << (8 * i);
  return v;
}

// Splits a TFRecord file into its records, checking both checksums of each.
std::vector<std::string> read_records(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string bytes = ss.str();
  std::vector<std::string> records;
  size_t at = 0;
  while (at < bytes.size()) {
    EXPECT_LE(at + 12, bytes.size());
    const uint64_t length = read_le(bytes, at, 8);
    EXPECT_EQ(read_le(bytes, at + 8, 4), masked_crc32c(bytes.substr(at, 8)));
    const std::string data = bytes.substr(at + 12, length);
    EXPECT_EQ(read_le(bytes, at + 12 + length, 4), masked_crc32c(data));
    records.push_back(data);
    at += 12 + length + 4;
  }
  EXPECT_EQ(at, bytes.size());
  return records;
}

TEST(Crc32c, MatchesPublishedVectors) {
  EXPECT_EQ(crc32c("123456789"), 0xe3069283u);             // the CRC catalogue's check value
  EXPECT_EQ(crc32c(std::string(32, '\0')), 0x8a9136aau);   // RFC 3720 B.4
  EXPECT_EQ(crc32c(std::string(32, '\xff')), 0x62a8ab43u); // RFC 3720 B.4
  EXPECT_EQ(crc32c(""), 0u);
}

TEST(TfRecord, FramesLengthDataAndMaskedChecksums) {
  const std::string record = tfrecord("abc");
  ASSERT_EQ(record.size(), 8u + 4 + 3 + 4);
  EXPECT_EQ(read_le(record, 0, 8), 3u);
  EXPECT_EQ(record.substr(12, 3), "abc");
  const uint32_t c = crc32c("abc");
  EXPECT_EQ(read_le(record, 15, 4), static_cast<uint32_t>(((c >> 15) | (c << 17)) + 0xa282ead8u));
}

TEST(TensorBoardWriter, WritesAVersionRecordThenOneEventPerScalar) {
  const fs::path dir = fs::temp_directory_path() / ("gradbox_tb_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  fs::path file;
  {
    TensorBoardWriter writer(dir);
    file = writer.path();
    writer.scalar("train/loss", 5.5, 1);
    writer.scalar("train/loss", 4.25, 2);
    writer.scalar("round/wait_seconds", 0.5, 2);
    writer.flush();
  }
  EXPECT_NE(file.filename().string().find("tfevents"), std::string::npos);
  const std::vector<std::string> records = read_records(file);
  ASSERT_EQ(records.size(), 4u);
  tensorboard::Event first;
  ASSERT_TRUE(first.ParseFromString(records[0]));
  EXPECT_EQ(first.file_version(), "brain.Event:2");
  const std::vector<std::tuple<std::string, float, int64_t>> want = {
      {"train/loss", 5.5f, 1}, {"train/loss", 4.25f, 2}, {"round/wait_seconds", 0.5f, 2}};
  for (size_t i = 0; i < want.size(); ++i) {
    tensorboard::Event e;
    ASSERT_TRUE(e.ParseFromString(records[i + 1]));
    ASSERT_TRUE(e.has_summary());
    ASSERT_EQ(e.summary().value_size(), 1);
    EXPECT_EQ(e.summary().value(0).tag(), std::get<0>(want[i]));
    EXPECT_EQ(e.summary().value(0).simple_value(), std::get<1>(want[i]));
    EXPECT_EQ(e.step(), std::get<2>(want[i]));
    EXPECT_GT(e.wall_time(), 1.7e9);
  }
  fs::remove_all(dir);
}

TEST(TensorBoardWriter, NamesTheFileItCannotCreate) {
  try {
    TensorBoardWriter writer("/nonexistent/gradbox/run");
    FAIL() << "no error";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/gradbox/run/events.out.tfevents."), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace gradbox::metrics
