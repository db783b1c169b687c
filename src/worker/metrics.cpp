#include "worker/metrics.h"

#include "common/error.h"

namespace gradbox::worker {

MetricsWriter::MetricsWriter(const std::filesystem::path& path) : path_(path), out_(path, std::ios::app) {
  GB_REQUIRE(out_.good(), path.string(), ": cannot open metrics file for appending");
}

void MetricsWriter::write(const nlohmann::json& record) {
  out_ << record.dump() << '\n';
  out_.flush();
  GB_REQUIRE(out_.good(), path_.string(), ": write failed");
}

}  // namespace gradbox::worker
