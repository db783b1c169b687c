#include "worker/metrics.h"

#include "common/error.h"

namespace gradbox::worker {
namespace {

// "round" for a DiLoCo round's record, "eval" for a validation loss, "train" otherwise.
std::string record_kind(const nlohmann::json& record) {
  if (record.contains("round")) return "round";
  if (record.contains("val_loss")) return "eval";
  return "train";
}

}  // namespace

MetricsWriter::MetricsWriter(const std::filesystem::path& path)
    : path_(path), out_(path, std::ios::app), tensorboard_(path.parent_path()) {
  GB_REQUIRE(out_.good(), path.string(), ": cannot open metrics file for appending");
}

void MetricsWriter::write(const nlohmann::json& record) {
  out_ << record.dump() << '\n';
  out_.flush();
  GB_REQUIRE(out_.good(), path_.string(), ": write failed");
  const auto step = record.find("step");
  if (step == record.end() || !step->is_number()) return;
  const std::string kind = record_kind(record);
  for (const auto& [key, value] : record.items())
    if (key != "step" && value.is_number()) tensorboard_.scalar(kind + "/" + key, value.get<double>(), step->get<int64_t>());
  tensorboard_.flush();
}

}  // namespace gradbox::worker
