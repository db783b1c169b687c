// A model config: the JSON of --model FILE, of a checkpoint's config, of a peer's run config.
#include <nlohmann/json.hpp>

#include "common/error.h"
#include "fuzz_target.h"
#include "model/config.h"

using namespace gradbox;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const nlohmann::json j = nlohmann::json::parse(fuzz::as_text(data, size), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return 0;
  try {
    const model::ModelConfig config = model::ModelConfig::from_json(j, "fuzz");
    (void)model::ModelConfig::from_json(config.to_json(), "fuzz");  // what it writes it reads
  } catch (const InputError&) {
  }
  return 0;
}
