#pragma once
// The untrusted half of reading a safetensors file (model/safetensors.h has the format): its
// header length and JSON header checked against the file's size, before any tensor is made.
// Torch-free, so that it can be fuzzed alone (tests/fuzz/safetensors_fuzz.cpp).
#include <cstdint>
#include <istream>
#include <map>
#include <string>
#include <vector>

namespace gradbox::model {

struct SafetensorsTensor {
  std::string name;
  std::string dtype;            // one of safetensors_dtypes()
  std::vector<int64_t> shape;
  uint64_t begin = 0, end = 0;  // byte range in the data section
};

struct SafetensorsLayout {
  std::vector<SafetensorsTensor> tensors;  // in file order (by offset)
  std::map<std::string, std::string> metadata;
  uint64_t data_start = 0;  // file offset of the data section
};

// The dtype names gradbox reads and writes, with their element sizes in bytes.
const std::map<std::string, uint64_t>& safetensors_dtypes();

// Reads the header from `in` (positioned at the file's start; `file_size` bytes long). The
// header length must be sane (<= 100 MB, inside the file), the JSON an object, each dtype known,
// each byte range inside the data section, matching dtype x shape, and not overlapping another.
// Anything else throws InputError naming `where` and the reason.
SafetensorsLayout read_safetensors_layout(std::istream& in, uint64_t file_size, const std::string& where);

}  // namespace gradbox::model
