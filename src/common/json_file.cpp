#include "common/json_file.h"

#include "common/atomic_file.h"
#include "common/error.h"

namespace gradbox {

nlohmann::json read_json_file(const std::filesystem::path& path) {
  const std::string text = read_file(path);
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  GB_REQUIRE(!j.is_discarded(), path.string(), ": not valid JSON");
  return j;
}

}  // namespace gradbox
