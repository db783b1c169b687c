// control.json as a worker reads its inbox copy (anyone with write access edits it by hand).
#include "common/error.h"
#include "exchange/live_control.h"
#include "fuzz_target.h"

using namespace gradbox;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const exchange::LiveControl control = exchange::LiveControl::parse(std::string(fuzz::as_text(data, size)), "fuzz");
    (void)control.describe();
    (void)exchange::describe_change(exchange::LiveControl{}, control);
    (void)exchange::LiveControl::parse(control.to_json().dump(), "fuzz");  // what it writes it reads
  } catch (const InputError&) {
  }
  return 0;
}
