#pragma once
// TensorBoard event files, so `tensorboard --logdir OUT` shows a run's metrics (in Colab too).
//
// The format is TensorFlow's TFRecord of Event protos: each record is
//   u64 length | u32 masked CRC32C(length) | Event bytes | u32 masked CRC32C(Event bytes)
// (little-endian; mask(c) = rotate-right(c, 15) + 0xa282ead8), and the first record of a file is
// an Event with file_version "brain.Event:2". TensorBoard reads every file under the log folder
// whose name holds "tfevents"; a new writer starts a new file, so a resumed run appends rather
// than rewrites.
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>

namespace gradbox::metrics {

uint32_t crc32c(std::string_view bytes);
uint32_t masked_crc32c(std::string_view bytes);  // TFRecord's checksum
std::string tfrecord(std::string_view data);     // one framed record

class TensorBoardWriter {
 public:
  // Creates `dir`/events.out.tfevents.<unix seconds>.<host>.<pid>; InputError naming it on failure.
  explicit TensorBoardWriter(const std::filesystem::path& dir);
  void scalar(const std::string& tag, double value, int64_t step);
  void flush();  // TensorBoard sees what is flushed
  const std::filesystem::path& path() const { return path_; }

 private:
  void write_record(const std::string& event_bytes);

  std::filesystem::path path_;
  std::ofstream out_;
};

}  // namespace gradbox::metrics
