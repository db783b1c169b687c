#pragma once
// Note [Fuzzing]
// Every decoder of bytes from outside the process has a fuzz target here: the framing and
// headers of shared-folder files (and the gradient payload decode a header leads to), each
// codec's payload, control.json, checkpoint manifests, model configs, GPT-2 tokenizer files and
// safetensors files. A folder checkpoint's parts are shared-folder files (the envelope target);
// reassembled, they are checked against the manifest's checksums and read as safetensors.
// A target feeds one input to the decoder the way gradbox reads such bytes and accepts only the
// errors gradbox reports for bad input (InputError, WireError, CodecError); anything else, a
// crash, or a sanitizer report is a finding.
//
//   scripts/fuzz.sh [SECONDS]   builds them with clang, libFuzzer, ASan and UBSan (build-fuzz/)
//                               and runs each for SECONDS (default 300), growing its corpus
//   ctest -R fuzz_replay        the normal build links each target with replay_main.cpp and
//                               replays its saved corpus (tests/fuzz/corpus/<target>/): CI
//
// Torch-free: the fuzz build has no LibTorch. For safetensors that is every check made before a
// tensor exists (model/safetensors_layout.h); the copies into tensors after them are not fuzzed.
#include <cstddef>
#include <cstdint>
#include <string_view>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace gradbox::fuzz {

inline std::string_view as_text(const uint8_t* data, size_t size) {
  return std::string_view(reinterpret_cast<const char*>(data), size);
}

}  // namespace gradbox::fuzz
