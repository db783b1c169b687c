// A safetensors file (a checkpoint's model or optimizer, a Hugging Face import) as the loader
// checks it before any tensor is made: after a folder checkpoint is reassembled from parts, or
// from a folder the user names.
#include <sstream>

#include "common/error.h"
#include "fuzz_target.h"
#include "model/safetensors_layout.h"

using namespace gradbox;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::istringstream in{std::string(fuzz::as_text(data, size))};
  try {
    const model::SafetensorsLayout layout = model::read_safetensors_layout(in, size, "fuzz");
    // What the loader relies on: every range is inside the file and no two overlap.
    uint64_t previous_end = 0;
    for (const model::SafetensorsTensor& t : layout.tensors) {
      if (t.begin == t.end) continue;
      if (t.begin < previous_end || layout.data_start + t.end > size) __builtin_trap();
      previous_end = t.end;
    }
  } catch (const InputError&) {
  }
  return 0;
}
