#pragma once
// DIR/meta.json of a prepared dataset: what train.bin and val.bin hold and their checksums.
// It is written last, atomically: a folder without meta.json is not a dataset.
#include <cstdint>
#include <filesystem>
#include <string>

namespace gradbox::data {

inline constexpr const char* kDatasetFormat = "gradbox-tokens";
inline constexpr int kDatasetVersion = 1;
inline constexpr const char* kMetaFile = "meta.json";

struct DatasetMeta {
  std::string dtype;  // "uint16" | "uint32"
  int32_t vocab_size = 0;
  int32_t eot_id = 0;
  std::string tokenizer;  // Tokenizer::kind()
  int64_t train_tokens = 0;
  int64_t val_tokens = 0;
  uint64_t train_checksum = 0;  // XXH3-64 of the file's bytes
  uint64_t val_checksum = 0;
  // "documents": informational, not needed to read the data.
  int64_t docs_read = 0;
  int64_t docs_kept = 0;
  int64_t train_docs = 0;
  int64_t val_docs = 0;
  double val_fraction = 0;
  uint64_t seed = 0;
};

std::string dataset_meta_json(const DatasetMeta& meta);

// Reads and validates DIR/meta.json. Throws InputError naming the file (and the key) when it
// is missing, not JSON, of another format or version, lacks a key or holds a bad value.
DatasetMeta read_dataset_meta(const std::filesystem::path& dir);

}  // namespace gradbox::data
