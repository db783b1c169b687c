#pragma once
// The safetensors format (Hugging Face): an 8-byte little-endian header length N, N bytes of
// JSON {"name": {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]}, ...,
// "__metadata__": {"key": "value"}}, then the raw little-endian tensor bytes, offsets counted
// from the end of the header.
#include <torch/torch.h>

#include <filesystem>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace gradbox::model {

// Writes atomically (temp file, fsync, rename, fsync dir). Tensors are stored in the given
// order, any device and layout (copied to contiguous CPU memory); names must be unique.
// Dtypes: F64, F32, F16, BF16, I64, I32, I16, I8, U8, BOOL.
void save_safetensors(const std::filesystem::path& path,
                      const std::vector<std::pair<std::string, torch::Tensor>>& tensors,
                      const std::map<std::string, std::string>& metadata = {});

// Reads every tensor into CPU memory. The file is untrusted: the header length must be sane
// (<= 100 MB, inside the file), the JSON well-formed, each dtype known, each byte range inside
// the data section, matching dtype x shape, and not overlapping another. Anything else throws
// InputError naming the file and the reason. `metadata`, when given, receives __metadata__.
std::map<std::string, torch::Tensor> load_safetensors(
    const std::filesystem::path& path, std::map<std::string, std::string>* metadata = nullptr);

}  // namespace gradbox::model
