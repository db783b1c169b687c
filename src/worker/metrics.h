#pragma once
// Metrics go to a JSONL file, one object per line, flushed per line: plots and `gradbox status`
// read it; nothing is ever parsed out of logs.
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

namespace gradbox::worker {

class MetricsWriter {
 public:
  explicit MetricsWriter(const std::filesystem::path& path);  // appends; InputError naming the file
  void write(const nlohmann::json& record);

 private:
  std::filesystem::path path_;
  std::ofstream out_;
};

}  // namespace gradbox::worker
