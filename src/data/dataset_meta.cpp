#include "data/dataset_meta.h"

#include <nlohmann/json.hpp>

#include "common/atomic_file.h"
#include "common/checksum.h"
#include "common/error.h"

namespace gradbox::data {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

class MetaReader {
 public:
  MetaReader(fs::path file, const json& j) : file_(std::move(file)), j_(j) {}

  const json& at(const char* key) const {
    const auto it = j_.find(key);
    GB_REQUIRE(it != j_.end(), file_.string(), ": missing key '", key, "'");
    return *it;
  }
  std::string string(const char* key) const {
    const json& v = at(key);
    GB_REQUIRE(v.is_string(), file_.string(), ": key '", key, "' must be a string");
    return v.get<std::string>();
  }
  int64_t integer(const char* key, int64_t min, int64_t max) const {
    const json& v = at(key);
    GB_REQUIRE(v.is_number_integer(), file_.string(), ": key '", key, "' must be an integer");
    const auto value = v.get<int64_t>();
    GB_REQUIRE(value >= min && value <= max, file_.string(), ": key '", key, "' is ", value,
               ", outside [", min, ", ", max, "]");
    return value;
  }
  uint64_t checksum(const char* key) const {
    const std::string hex = string(key);
    GB_REQUIRE(hex.size() == 16 && hex.find_first_not_of("0123456789abcdef") == std::string::npos,
               file_.string(), ": key '", key, "' must be 16 lowercase hex digits, not '", hex,
               "'");
    return std::stoull(hex, nullptr, 16);
  }

 private:
  fs::path file_;
  const json& j_;
};

}  // namespace

std::string dataset_meta_json(const DatasetMeta& meta) {
  json j = {
      {"format", kDatasetFormat},
      {"version", kDatasetVersion},
      {"dtype", meta.dtype},
      {"vocab_size", meta.vocab_size},
      {"eot_id", meta.eot_id},
      {"tokenizer", meta.tokenizer},
      {"train_tokens", meta.train_tokens},
      {"val_tokens", meta.val_tokens},
      {"train_checksum", to_hex64(meta.train_checksum)},
      {"val_checksum", to_hex64(meta.val_checksum)},
      {"documents",
       {{"read", meta.docs_read},
        {"kept", meta.docs_kept},
        {"train", meta.train_docs},
        {"val", meta.val_docs}}},
      {"split", {{"val_fraction", meta.val_fraction}, {"seed", meta.seed}}},
  };
  return j.dump(2) + "\n";
}

DatasetMeta read_dataset_meta(const fs::path& dir) {
  const fs::path file = dir / kMetaFile;
  std::error_code ec;
  GB_REQUIRE(fs::exists(file, ec), dir.string(),
             ": not a prepared dataset (no meta.json); run `gradbox prepare` first");
  const std::string text = read_file(file);
  const json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  GB_REQUIRE(!j.is_discarded() && j.is_object(), file.string(), ": not a JSON object");
  const MetaReader r(file, j);

  const std::string format = r.string("format");
  GB_REQUIRE(format == kDatasetFormat, file.string(), ": key 'format' is '", format,
             "', expected '", kDatasetFormat, "'");
  const int64_t version = r.integer("version", 0, INT32_MAX);
  GB_REQUIRE(version == kDatasetVersion, file.string(), ": key 'version' is ", version,
             ", this gradbox reads version ", kDatasetVersion);

  DatasetMeta meta;
  meta.dtype = r.string("dtype");
  GB_REQUIRE(meta.dtype == "uint16" || meta.dtype == "uint32", file.string(),
             ": key 'dtype' is '", meta.dtype, "', expected 'uint16' or 'uint32'");
  meta.vocab_size = static_cast<int32_t>(r.integer("vocab_size", 1, INT32_MAX));
  GB_REQUIRE((meta.vocab_size <= 65536) == (meta.dtype == "uint16"), file.string(),
             ": key 'dtype' is '", meta.dtype, "' but 'vocab_size' is ", meta.vocab_size);
  meta.eot_id = static_cast<int32_t>(r.integer("eot_id", 0, meta.vocab_size - 1));
  meta.tokenizer = r.string("tokenizer");
  meta.train_tokens = r.integer("train_tokens", 0, INT64_MAX / 4);
  meta.val_tokens = r.integer("val_tokens", 0, INT64_MAX / 4);
  meta.train_checksum = r.checksum("train_checksum");
  meta.val_checksum = r.checksum("val_checksum");
  // Informational sections: read when present and well-formed, never required.
  auto optional_int = [](const json& section, const char* key) -> int64_t {
    const auto it = section.find(key);
    return it != section.end() && it->is_number_integer() ? it->get<int64_t>() : 0;
  };
  if (const auto docs = j.find("documents"); docs != j.end() && docs->is_object()) {
    meta.docs_read = optional_int(*docs, "read");
    meta.docs_kept = optional_int(*docs, "kept");
    meta.train_docs = optional_int(*docs, "train");
    meta.val_docs = optional_int(*docs, "val");
  }
  if (const auto split = j.find("split"); split != j.end() && split->is_object()) {
    const auto fraction = split->find("val_fraction");
    if (fraction != split->end() && fraction->is_number()) meta.val_fraction = fraction->get<double>();
    meta.seed = static_cast<uint64_t>(optional_int(*split, "seed"));
  }
  return meta;
}

}  // namespace gradbox::data
