// Every codec's payload decoder, as a worker runs it on a peer's contribution: the first byte
// picks the codec and its byte planes, the next two the element count; the rest is the payload.
#include <vector>

#include "codec/codec.h"
#include "common/error.h"
#include "fuzz_target.h"

using namespace gradbox;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 3) return 0;
  codec::CodecOptions options = codec::default_options(static_cast<codec::Codec>(data[0] % 5));
  options.shuffle = (data[0] & 0x80) != 0;
  const size_t n = (size_t{data[1]} << 8 | data[2]) + ((data[0] & 0x40) ? 70000 : 0);  // past one chunk, sometimes
  std::vector<float> out(n, 0.5f);
  try {
    codec::decode(data + 3, size - 3, options, out.data(), out.size());
  } catch (const codec::CodecError&) {
  } catch (const InputError&) {
  }
  try {
    codec::decode_accumulate(data + 3, size - 3, options, 0.25f, out.data(), out.size());
  } catch (const codec::CodecError&) {
  } catch (const InputError&) {
  }
  return 0;
}
