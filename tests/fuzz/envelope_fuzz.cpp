// The framing and header of a shared-folder file, as the syncer and the worker read one: the
// head alone (verify_head), the whole (verify_bytes, parse with and without the run key), the
// run check, and, for a gradient, the payload decode its header leads to.
#include <algorithm>
#include <string>
#include <vector>

#include "codec/codec.h"
#include "common/error.h"
#include "exchange/round_agreement.h"
#include "fuzz_target.h"
#include "wire/envelope.h"

using namespace gradbox;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const wire::FileMac mac(wire::RunSecret::from_text("the fuzzing run's secret", "fuzz"));
  const std::string_view bytes = fuzz::as_text(data, size);
  (void)wire::verify_bytes(bytes);
  const size_t head = std::min(size, wire::head_size(bytes.substr(0, std::min(size, wire::kPreambleSize))));
  (void)wire::verify_head(bytes.substr(0, head), size);  // what a copier reads first
  for (const wire::FileKey key : {wire::FileKey{}, wire::FileKey{&mac, "rounds/r00000001/g-a-s0-0123456789abcdef.gbx"}}) {
    try {
      const wire::WireView view = wire::parse_view(bytes, "fuzz", key);
      wire::check_identity(view.header, "run", 42, "fuzz");
      if (!view.header.has_gradient()) continue;
      // The worker decodes a gradient with its run's options, into the shard its run expects.
      const wire::GradientShard& g = view.header.gradient();
      const codec::CodecOptions options = exchange::decode_options(g.codec(), codec::default_options(codec::Codec::fp16), "fuzz");
      std::vector<float> out(g.end() > g.begin() ? std::min<uint64_t>(g.end() - g.begin(), 1 << 16) : 0);
      codec::decode(reinterpret_cast<const uint8_t*>(view.payload.data()), view.payload.size(), options, out.data(), out.size());
    } catch (const wire::WireError&) {
    } catch (const codec::CodecError&) {
    } catch (const InputError&) {
    }
  }
  try {
    (void)wire::parse(std::string(bytes), "fuzz");
  } catch (const wire::WireError&) {
  }
  return 0;
}
