#include "model/safetensors.h"

#include <algorithm>
#include <bit>
#include <fstream>
#include <limits>

#include <nlohmann/json.hpp>

#include "common/atomic_file.h"
#include "common/error.h"

namespace gradbox::model {

namespace {

static_assert(std::endian::native == std::endian::little,
              "safetensors stores little-endian data; big-endian hosts would need byte swaps");

constexpr uint64_t kMaxHeaderBytes = 100'000'000;  // the reference implementation's limit

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

std::string known_dtypes() {
  std::string out;
  for (const auto& d : kDtypes) out += (out.empty() ? "" : ", ") + std::string(d.name);
  return out;
}

// Multiplies with an overflow check: shapes in the file are untrusted.
bool checked_mul(uint64_t a, uint64_t b, uint64_t* out) {
  if (a != 0 && b > std::numeric_limits<uint64_t>::max() / a) return false;
  *out = a * b;
  return true;
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
  GB_REQUIRE(file_size >= 8, where, ": truncated safetensors file (", file_size,
             " bytes, less than the 8-byte header length)");

  uint64_t header_len = 0;
  in.read(reinterpret_cast<char*>(&header_len), sizeof(header_len));
  GB_REQUIRE(in, where, ": cannot read the header length");
  GB_REQUIRE(header_len <= kMaxHeaderBytes, where, ": header length ", header_len,
             " is larger than the ", kMaxHeaderBytes, "-byte limit: not a safetensors file?");
  GB_REQUIRE(header_len <= file_size - 8, where, ": truncated safetensors file: header length ",
             header_len, " but only ", file_size - 8, " bytes follow");
  std::string json_text(header_len, '\0');
  in.read(json_text.data(), static_cast<std::streamsize>(header_len));
  GB_REQUIRE(in, where, ": cannot read the ", header_len, "-byte header");

  nlohmann::json header = nlohmann::json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  GB_REQUIRE(!header.is_discarded(), where, ": corrupt safetensors header: not valid JSON");
  GB_REQUIRE(header.is_object(), where, ": corrupt safetensors header: not a JSON object");

  const uint64_t data_size = file_size - 8 - header_len;
  struct Entry {
    std::string name;
    torch::ScalarType type;
    std::vector<int64_t> shape;
    uint64_t begin, end;
  };
  std::vector<Entry> entries;
  for (const auto& [name, info] : header.items()) {
    if (name == "__metadata__") {
      GB_REQUIRE(info.is_object(), where, ": __metadata__ must be a JSON object");
      for (const auto& [key, value] : info.items()) {
        GB_REQUIRE(value.is_string(), where, ": __metadata__ value of '", key,
                   "' must be a string");
        if (metadata) (*metadata)[key] = value.get<std::string>();
      }
      continue;
    }
    const std::string bad = gradbox::str(where, ": tensor '", name, "': ");
    GB_REQUIRE(info.is_object() && info.contains("dtype") && info.contains("shape") &&
                   info.contains("data_offsets"),
               bad, "needs dtype, shape and data_offsets");
    const auto& dt = info["dtype"];
    GB_REQUIRE(dt.is_string(), bad, "dtype must be a string");
    const auto* found = std::find_if(std::begin(kDtypes), std::end(kDtypes), [&](const DtypeName& d) {
      return dt.get<std::string>() == d.name;
    });
    GB_REQUIRE(found != std::end(kDtypes), bad, "unsupported dtype '", dt.get<std::string>(),
               "' (known: ", known_dtypes(), ")");
    Entry e{name, found->type, {}, 0, 0};
    const auto& shape = info["shape"];
    GB_REQUIRE(shape.is_array(), bad, "shape must be an array");
    uint64_t numel = 1;
    for (const auto& dim : shape) {
      GB_REQUIRE(dim.is_number_unsigned(), bad, "shape ", shape.dump(), " has a bad dimension");
      const uint64_t d = dim.get<uint64_t>();
      GB_REQUIRE(d <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) &&
                     checked_mul(numel, d, &numel),
                 bad, "shape ", shape.dump(), " is too large");
      e.shape.push_back(static_cast<int64_t>(d));
    }
    uint64_t bytes = 0;
    GB_REQUIRE(checked_mul(numel, c10::elementSize(e.type), &bytes), bad, "shape ", shape.dump(),
               " is too large");
    const auto& offsets = info["data_offsets"];
    GB_REQUIRE(offsets.is_array() && offsets.size() == 2 && offsets[0].is_number_unsigned() &&
                   offsets[1].is_number_unsigned(),
               bad, "data_offsets must be two non-negative integers, got ", offsets.dump());
    e.begin = offsets[0].get<uint64_t>();
    e.end = offsets[1].get<uint64_t>();
    GB_REQUIRE(e.begin <= e.end, bad, "data_offsets [", e.begin, ", ", e.end, "] are reversed");
    GB_REQUIRE(e.end <= data_size, bad, "data_offsets [", e.begin, ", ", e.end,
               "] run past the end of the data (", data_size, " bytes): truncated file?");
    GB_REQUIRE(e.end - e.begin == bytes, bad, "data_offsets [", e.begin, ", ", e.end, "] hold ",
               e.end - e.begin, " bytes, but ", dt.get<std::string>(), " ", shape.dump(),
               " needs ", bytes);
    entries.push_back(std::move(e));
  }

  // No two tensors may share bytes: a crafted file could otherwise alias them.
  std::vector<const Entry*> by_offset;
  for (const auto& e : entries) by_offset.push_back(&e);
  std::sort(by_offset.begin(), by_offset.end(),
            [](const Entry* a, const Entry* b) { return a->begin < b->begin; });
  for (size_t i = 1; i < by_offset.size(); ++i) {
    const Entry& prev = *by_offset[i - 1];
    const Entry& cur = *by_offset[i];
    GB_REQUIRE(cur.begin >= prev.end || prev.begin == prev.end || cur.begin == cur.end, where,
               ": corrupt safetensors header: tensors '", prev.name, "' and '", cur.name,
               "' overlap");
  }

  std::map<std::string, torch::Tensor> tensors;
  const uint64_t data_start = 8 + header_len;
  for (const auto& e : by_offset) {  // file order: sequential reads
    // Bools are read as bytes and compared with 0: a byte other than 0 or 1 is no valid bool.
    const auto read_type = e->type == torch::kBool ? torch::kUInt8 : e->type;
    torch::Tensor t = torch::empty(e->shape, torch::TensorOptions().dtype(read_type));
    const uint64_t bytes = e->end - e->begin;
    if (bytes > 0) {
      in.seekg(static_cast<std::streamoff>(data_start + e->begin));
      in.read(static_cast<char*>(t.data_ptr()), static_cast<std::streamsize>(bytes));
      GB_REQUIRE(in, where, ": cannot read tensor '", e->name, "' (", bytes,
                 " bytes): truncated file?");
    }
    tensors.emplace(e->name, e->type == torch::kBool ? t.ne(0) : std::move(t));
  }
  return tensors;
}

}  // namespace gradbox::model
