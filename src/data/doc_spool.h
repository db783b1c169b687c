#pragma once
// A scratch file of cleaned documents, exact bytes, for the second pass of `prepare` (after the
// BPE has been trained on the first). Records are a 4-byte little-endian length and the bytes.
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <string>
#include <string_view>

namespace gradbox::data {

class SpoolWriter {
 public:
  explicit SpoolWriter(std::filesystem::path path);  // InputError naming the file
  ~SpoolWriter();
  SpoolWriter(const SpoolWriter&) = delete;
  SpoolWriter& operator=(const SpoolWriter&) = delete;

  void write(std::string_view doc);
  void close();  // flushes; InputError naming the file on a write error

 private:
  std::filesystem::path path_;
  std::FILE* file_ = nullptr;
};

class SpoolReader {
 public:
  explicit SpoolReader(std::filesystem::path path);
  ~SpoolReader();
  SpoolReader(const SpoolReader&) = delete;
  SpoolReader& operator=(const SpoolReader&) = delete;

  bool next(std::string& doc);  // false at the end; InputError on a short or failed read

 private:
  std::filesystem::path path_;
  std::FILE* file_ = nullptr;
};

}  // namespace gradbox::data
