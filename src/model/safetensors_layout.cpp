#include "model/safetensors_layout.h"

#include <algorithm>
#include <limits>

#include <nlohmann/json.hpp>

#include "common/error.h"

namespace gradbox::model {
namespace {

constexpr uint64_t kMaxHeaderBytes = 100'000'000;  // the reference implementation's limit

std::string known_dtypes() {
  std::string out;
  for (const auto& [name, size] : safetensors_dtypes()) out += (out.empty() ? "" : ", ") + name;
  return out;
}

// Multiplies with an overflow check: shapes in the file are untrusted.
bool checked_mul(uint64_t a, uint64_t b, uint64_t* out) {
  if (a != 0 && b > std::numeric_limits<uint64_t>::max() / a) return false;
  *out = a * b;
  return true;
}

}  // namespace

const std::map<std::string, uint64_t>& safetensors_dtypes() {
  static const std::map<std::string, uint64_t> kSizes = {{"F64", 8}, {"F32", 4}, {"F16", 2}, {"BF16", 2}, {"I64", 8},
                                                         {"I32", 4}, {"I16", 2}, {"I8", 1},  {"U8", 1},   {"BOOL", 1}};
  return kSizes;
}

SafetensorsLayout read_safetensors_layout(std::istream& in, uint64_t file_size, const std::string& where) {
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

  const nlohmann::json header = nlohmann::json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  GB_REQUIRE(!header.is_discarded(), where, ": corrupt safetensors header: not valid JSON");
  GB_REQUIRE(header.is_object(), where, ": corrupt safetensors header: not a JSON object");

  SafetensorsLayout layout;
  layout.data_start = 8 + header_len;
  const uint64_t data_size = file_size - layout.data_start;
  for (const auto& [name, info] : header.items()) {
    if (name == "__metadata__") {
      GB_REQUIRE(info.is_object(), where, ": __metadata__ must be a JSON object");
      for (const auto& [key, value] : info.items()) {
        GB_REQUIRE(value.is_string(), where, ": __metadata__ value of '", key, "' must be a string");
        layout.metadata[key] = value.get<std::string>();
      }
      continue;
    }
    const std::string bad = str(where, ": tensor '", name, "': ");
    GB_REQUIRE(info.is_object() && info.contains("dtype") && info.contains("shape") && info.contains("data_offsets"),
               bad, "needs dtype, shape and data_offsets");
    const auto& dt = info["dtype"];
    GB_REQUIRE(dt.is_string(), bad, "dtype must be a string");
    const auto found = safetensors_dtypes().find(dt.get<std::string>());
    GB_REQUIRE(found != safetensors_dtypes().end(), bad, "unsupported dtype '", dt.get<std::string>(),
               "' (known: ", known_dtypes(), ")");
    SafetensorsTensor t{name, found->first, {}, 0, 0};
    const auto& shape = info["shape"];
    GB_REQUIRE(shape.is_array(), bad, "shape must be an array");
    uint64_t numel = 1;
    for (const auto& dim : shape) {
      GB_REQUIRE(dim.is_number_unsigned(), bad, "shape ", shape.dump(), " has a bad dimension");
      const uint64_t d = dim.get<uint64_t>();
      GB_REQUIRE(d <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) && checked_mul(numel, d, &numel), bad,
                 "shape ", shape.dump(), " is too large");
      t.shape.push_back(static_cast<int64_t>(d));
    }
    uint64_t bytes = 0;
    GB_REQUIRE(checked_mul(numel, found->second, &bytes), bad, "shape ", shape.dump(), " is too large");
    const auto& offsets = info["data_offsets"];
    GB_REQUIRE(offsets.is_array() && offsets.size() == 2 && offsets[0].is_number_unsigned() &&
                   offsets[1].is_number_unsigned(),
               bad, "data_offsets must be two non-negative integers, got ", offsets.dump());
    t.begin = offsets[0].get<uint64_t>();
    t.end = offsets[1].get<uint64_t>();
    GB_REQUIRE(t.begin <= t.end, bad, "data_offsets [", t.begin, ", ", t.end, "] are reversed");
    GB_REQUIRE(t.end <= data_size, bad, "data_offsets [", t.begin, ", ", t.end,
               "] run past the end of the data (", data_size, " bytes): truncated file?");
    GB_REQUIRE(t.end - t.begin == bytes, bad, "data_offsets [", t.begin, ", ", t.end, "] hold ", t.end - t.begin,
               " bytes, but ", t.dtype, " ", shape.dump(), " needs ", bytes);
    layout.tensors.push_back(std::move(t));
  }

  // No two tensors may share bytes: a crafted file could otherwise alias them.
  std::sort(layout.tensors.begin(), layout.tensors.end(),
            [](const SafetensorsTensor& a, const SafetensorsTensor& b) { return a.begin < b.begin; });
  // Empty tensors hold no bytes and are skipped: compared only with their neighbours, one inside
  // another tensor's range once hid that range's overlap with the next.
  const SafetensorsTensor* prev = nullptr;
  for (const SafetensorsTensor& cur : layout.tensors) {
    if (cur.begin == cur.end) continue;
    GB_REQUIRE(!prev || cur.begin >= prev->end, where, ": corrupt safetensors header: tensors '", prev->name, "' and '",
               cur.name, "' overlap");
    prev = &cur;
  }
  return layout;
}

}  // namespace gradbox::model
