// A folder checkpoint's manifest as a joiner reads one from the shared folder.
#include "common/error.h"
#include "exchange/folder_checkpoint.h"
#include "fuzz_target.h"
#include "wire/envelope.h"

using namespace gradbox;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const exchange::FileIdentity identity{"run", 42, nullptr};
  try {
    (void)exchange::read_checkpoint_manifest(fuzz::as_text(data, size), "fuzz", "checkpoints/s00000001-e0-a", identity);
  } catch (const wire::WireError&) {
  } catch (const InputError&) {
  }
  return 0;
}
