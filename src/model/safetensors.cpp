#include "model/safetensors.h"

#include <algorithm>
#include <bit>
#include <fstream>
#include <limits>

#include <nlohmann/json.hpp>

#include "common/atomic_file.h"
#include "common/error.h"
#include "model/safetensors_layout.h"

namespace gradbox::model {

namespace {

static_assert(std::endian::native == std::endian::little,
              "safetensors stores little-endian data; big-endian hosts would need byte swaps");

struct DtypeName {
  const char* name;
  torch::ScalarType type;
};

constexpr DtypeName kDtypes[] = {
    {"F64", torch::kFloat64}, {"F32", torch::kFloat32}, {"F16", torch::kFloat16},
    {"BF16", torch::kBFloat16}, {"I64", torch::kInt64}, {"I32", torch::kInt32},
    {"I16", torch::kInt16},   {"I8", torch::kInt8},     {"U8", torch::kUInt8},
    {"BOOL", torch::kBool},
};

std::string dtype_name(torch::ScalarType type, const std::string& tensor) {
  for (const auto& d : kDtypes) {
    if (d.type == type) return d.name;
  }
  throw InputError(gradbox::str("safetensors: tensor '", tensor, "' has dtype ", type,
                       ", which this writer does not store"));
}

}  // namespace

void save_safetensors(const std::filesystem::path& path,
                      const std::vector<std::pair<std::string, torch::Tensor>>& tensors,
                      const std::map<std::string, std::string>& metadata) {
  nlohmann::json header = nlohmann::json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::vector<torch::Tensor> data;
  data.reserve(tensors.size());
  uint64_t offset = 0;
  for (const auto& [name, tensor] : tensors) {
    GB_REQUIRE(name != "__metadata__" && !header.contains(name), path.string(),
               ": tensor name '", name, "' is reserved or used twice");
    GB_CHECK(tensor.defined(), "undefined tensor '", name, "'");
    torch::Tensor t = tensor.detach().to(torch::kCPU).contiguous();
    const uint64_t bytes = t.numel() * t.element_size();
    header[name] = {{"dtype", dtype_name(t.scalar_type(), name)},
                    {"shape", t.sizes().vec()},
                    {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
    data.push_back(std::move(t));
  }
  std::string json = header.dump();
  json.append((8 - json.size() % 8) % 8, ' ');  // data starts 8-byte aligned
  const uint64_t header_len = json.size();

  AtomicFileWriter out(path);
  out.write(&header_len, sizeof(header_len));
  out.write(json);
  for (const auto& t : data) {
    if (t.numel() > 0) out.write(t.data_ptr(), t.numel() * t.element_size());
  }
  out.commit();
}

std::map<std::string, torch::Tensor> load_safetensors(const std::filesystem::path& path,
                                                      std::map<std::string, std::string>* metadata) {
  const std::string where = path.string();
  std::ifstream in(path, std::ios::binary);
  GB_REQUIRE(in, where, ": cannot open safetensors file");
  std::error_code ec;
  const uint64_t file_size = std::filesystem::file_size(path, ec);
  GB_REQUIRE(!ec, where, ": cannot read its size: ", ec.message());
  SafetensorsLayout layout = read_safetensors_layout(in, file_size, where);
  if (metadata)
    for (auto& [key, value] : layout.metadata) (*metadata)[key] = std::move(value);

  std::map<std::string, torch::Tensor> tensors;
  for (const SafetensorsTensor& e : layout.tensors) {  // file order: sequential reads
    const auto* dtype = std::find_if(std::begin(kDtypes), std::end(kDtypes),
                                     [&](const DtypeName& d) { return e.dtype == d.name; });
    GB_CHECK(dtype != std::end(kDtypes), "dtype ", e.dtype, " passed the layout check but has no torch type");
    // Bools are read as bytes and compared with 0: a byte other than 0 or 1 is no valid bool.
    const auto read_type = dtype->type == torch::kBool ? torch::kUInt8 : dtype->type;
    torch::Tensor t = torch::empty(e.shape, torch::TensorOptions().dtype(read_type));
    const uint64_t bytes = e.end - e.begin;
    if (bytes > 0) {
      in.seekg(static_cast<std::streamoff>(layout.data_start + e.begin));
      in.read(static_cast<char*>(t.data_ptr()), static_cast<std::streamsize>(bytes));
      GB_REQUIRE(in, where, ": cannot read tensor '", e.name, "' (", bytes, " bytes): truncated file?");
    }
    tensors.emplace(e.name, dtype->type == torch::kBool ? t.ne(0) : std::move(t));
  }
  return tensors;
}

}  // namespace gradbox::model
