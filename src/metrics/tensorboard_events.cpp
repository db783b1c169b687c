#include "metrics/tensorboard_events.h"

#include <unistd.h>

#include <array>
#include <chrono>

#include "common/error.h"
#include "tensorboard.pb.h"

namespace gradbox::metrics {
namespace {

constexpr uint32_t kCastagnoli = 0x82f63b78;  // reversed CRC-32C polynomial

std::array<uint32_t, 256> make_table() {
  std::array<uint32_t, 256> table{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ kCastagnoli : c >> 1;
    table[i] = c;
  }
  return table;
}

double unix_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string host_name() {
  char name[256] = {};
  if (gethostname(name, sizeof(name) - 1) != 0 || name[0] == '\0') return "localhost";
  return name;
}

void append_le(std::string& out, uint64_t value, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>((value >> (8 * i)) & 0xff));
}

}  // namespace

// Byte-at-a-time: metrics records are tens of bytes, a few per step.
uint32_t crc32c(std::string_view bytes) {
  static const std::array<uint32_t, 256> table = make_table();
  uint32_t c = 0xffffffffu;
  for (unsigned char b : bytes) c = table[(c ^ b) & 0xff] ^ (c >> 8);
  return c ^ 0xffffffffu;
}

uint32_t masked_crc32c(std::string_view bytes) {
  const uint32_t c = crc32c(bytes);
  return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

std::string tfrecord(std::string_view data) {
  std::string length;
  append_le(length, data.size(), 8);
  std::string out = length;
  append_le(out, masked_crc32c(length), 4);
  out.append(data);
  append_le(out, masked_crc32c(data), 4);
  return out;
}

TensorBoardWriter::TensorBoardWriter(const std::filesystem::path& dir) {
  const double now = unix_seconds();
  path_ = dir / str("events.out.tfevents.", static_cast<int64_t>(now), ".", host_name(), ".", getpid());
  out_.open(path_, std::ios::binary | std::ios::app);
  GB_REQUIRE(out_.good(), path_.string(), ": cannot create the TensorBoard event file");
  tensorboard::Event first;
  first.set_wall_time(now);
  first.set_file_version("brain.Event:2");
  write_record(first.SerializeAsString());
  flush();
}

void TensorBoardWriter::scalar(const std::string& tag, double value, int64_t step) {
  tensorboard::Event event;
  event.set_wall_time(unix_seconds());
  event.set_step(step);
  tensorboard::Summary::Value* v = event.mutable_summary()->add_value();
  v->set_tag(tag);
  v->set_simple_value(static_cast<float>(value));
  write_record(event.SerializeAsString());
}

void TensorBoardWriter::flush() {
  out_.flush();
  GB_REQUIRE(out_.good(), path_.string(), ": write failed");
}

void TensorBoardWriter::write_record(const std::string& event_bytes) {
  const std::string record = tfrecord(event_bytes);
  out_.write(record.data(), static_cast<std::streamsize>(record.size()));
}

}  // namespace gradbox::metrics
