#pragma once
// Metrics go to a JSONL file, one object per line, flushed per line: plots and `gradbox status`
// read it; nothing is ever parsed out of logs. Every numeric field of a record is also a
// TensorBoard scalar in an event file beside it, tagged by the record's kind (train/loss,
// eval/val_loss, round/wait_seconds, ...) at the record's "step".
#include <filesystem>
#include <fstream>
#include <memory>

#include <nlohmann/json.hpp>

#include "metrics/tensorboard_events.h"

namespace gradbox::worker {

class MetricsWriter {
 public:
  explicit MetricsWriter(const std::filesystem::path& path);  // appends; InputError naming the file
  void write(const nlohmann::json& record);

 private:
  std::filesystem::path path_;
  std::ofstream out_;
  metrics::TensorBoardWriter tensorboard_;
};

}  // namespace gradbox::worker
