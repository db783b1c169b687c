#include <gtest/gtest.h>
#include <torch/torch.h>

#include <fstream>

#include <nlohmann/json.hpp>

#include "common/atomic_file.h"
#include "model/safetensors.h"
#include "test_util.h"

namespace gradbox::model {
namespace {

namespace fs = std::filesystem;
using testing::expect_input_error;

// A file laid out by hand: u64 header length, header text, data bytes.
void write_raw(const fs::path& path, const std::string& header, const std::string& data,
               std::optional<uint64_t> header_len = std::nullopt) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  const uint64_t len = header_len.value_or(header.size());
  out.write(reinterpret_cast<const char*>(&len), 8);
  out << header << data;
}

// Plain (not atomic, no fsync) writes: these tests write thousands of small files.
void write_bytes(const fs::path& path, std::string_view bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

TEST(Safetensors, RoundTripsEveryDtypeShapeAndMetadata) {
  const fs::path path = testing::fresh_dir("rt") / "t.safetensors";
  torch::manual_seed(0);
  std::vector<std::pair<std::string, torch::Tensor>> tensors = {
      {"f64", torch::randn({3, 2}, torch::kFloat64)},
      {"f32", torch::randn({5})},
      {"f16", torch::randn({2, 3, 4}).to(torch::kFloat16)},
      {"bf16", torch::randn({7}).to(torch::kBFloat16)},
      {"i64", torch::randint(-1000000, 1000000, {4}, torch::kLong)},
      {"i32", torch::randint(-1000, 1000, {3}, torch::kInt)},
      {"i16", torch::randint(-1000, 1000, {3}, torch::kShort)},
      {"i8", torch::randint(-100, 100, {9}, torch::kChar)},
      {"u8", torch::randint(0, 255, {1, 1, 3}, torch::kByte)},
      {"bool", torch::randint(0, 2, {5}).to(torch::kBool)},
      {"empty", torch::empty({0})},
      {"empty2d", torch::empty({3, 0}, torch::kFloat16)},
      {"scalar", torch::tensor(3.5)},
      {"transposed", torch::arange(12, torch::kFloat).view({3, 4}).t()},  // not contiguous
  };
  const std::map<std::string, std::string> meta = {{"format", "pt"}, {"step", "12"}};
  save_safetensors(path, tensors, meta);
  std::map<std::string, std::string> meta_back;
  const auto back = load_safetensors(path, &meta_back);
  EXPECT_EQ(meta_back, meta);
  ASSERT_EQ(back.size(), tensors.size());
  for (const auto& [name, t] : tensors) {
    SCOPED_TRACE(name);
    ASSERT_TRUE(back.count(name));
    EXPECT_EQ(back.at(name).scalar_type(), t.scalar_type());
    EXPECT_EQ(back.at(name).sizes(), t.sizes());
    EXPECT_TRUE(torch::equal(back.at(name), t));
  }
  // The header keeps the data 8-byte aligned, as the reference writer does.
  const std::string bytes = read_file(path);
  uint64_t header_len = 0;
  std::memcpy(&header_len, bytes.data(), 8);
  EXPECT_EQ(header_len % 8, 0u);
  EXPECT_EQ(bytes[8], '{');
}

TEST(Safetensors, EmptyFileListAndNoMetadata) {
  const fs::path path = testing::fresh_dir("empty") / "e.safetensors";
  save_safetensors(path, {});
  std::map<std::string, std::string> meta;
  EXPECT_TRUE(load_safetensors(path, &meta).empty());
  EXPECT_TRUE(meta.empty());
}

TEST(Safetensors, RejectsDuplicateNames) {
  const fs::path path = testing::fresh_dir("dup") / "d.safetensors";
  expect_input_error([&] { save_safetensors(path, {{"a", torch::ones({1})}, {"a", torch::ones({1})}}); },
                     "'a'");
  EXPECT_FALSE(fs::exists(path));
}

TEST(Safetensors, TruncatedFilesAreNamedAndRejected) {
  const fs::path dir = testing::fresh_dir("trunc");
  const fs::path good = dir / "good.safetensors";
  save_safetensors(good, {{"w", torch::randn({4, 4})}, {"b", torch::randn({4})}});
  const std::string bytes = read_file(good);
  const fs::path cut = dir / "cut.safetensors";
  // Every prefix of the file: inside the length, inside the header, inside the data.
  for (size_t n = 0; n < bytes.size(); ++n) {
    write_bytes(cut, std::string_view(bytes).substr(0, n));
    SCOPED_TRACE(n);
    expect_input_error([&] { load_safetensors(cut); }, cut.string());
  }
}

TEST(Safetensors, CorruptHeadersAreNamedAndRejected) {
  const fs::path dir = testing::fresh_dir("corrupt");
  const fs::path f = dir / "bad.safetensors";
  const std::string data(16, '\0');
  auto header = [](const std::string& dtype, const std::string& shape, const std::string& offsets) {
    return "{\"t\":{\"dtype\":\"" + dtype + "\",\"shape\":" + shape + ",\"data_offsets\":" + offsets + "}}";
  };
  struct Bad {
    std::string header;
    std::optional<uint64_t> len;
    const char* reason;
  };
  const std::vector<Bad> cases = {
      {header("F32", "[4]", "[0,16]"), uint64_t{1} << 60, "limit"},
      {header("F32", "[4]", "[0,16]"), uint64_t{1000}, "truncated"},
      {"not json at all", std::nullopt, "not valid JSON"},
      {"[1,2,3]", std::nullopt, "not a JSON object"},
      {header("F99", "[4]", "[0,16]"), std::nullopt, "unsupported dtype 'F99'"},
      {header("F32", "[4]", "[0,32]"), std::nullopt, "past the end"},
      {header("F32", "[5]", "[0,16]"), std::nullopt, "needs 20"},
      {header("F32", "[4]", "[16,0]"), std::nullopt, "reversed"},
      {header("F32", "[-4]", "[0,16]"), std::nullopt, "bad dimension"},
      {header("F32", "[4611686018427387904,4]", "[0,16]"), std::nullopt, "too large"},
      {header("F32", "[4]", "[0]"), std::nullopt, "data_offsets"},
      {header("F32", "4", "[0,16]"), std::nullopt, "shape must be an array"},
      {"{\"t\":{\"dtype\":\"F32\"}}", std::nullopt, "needs dtype, shape and data_offsets"},
      {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
       "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}",
       std::nullopt, "overlap"},
      // An empty tensor between two that overlap once hid the overlap (compared with neighbours only).
      {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
       "\"e\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[4,4]},"
       "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[6,14]}}",
       std::nullopt, "'a' and 'b' overlap"},
      {"{\"__metadata__\":{\"k\":1}}", std::nullopt, "must be a string"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.header);
    write_raw(f, c.header, data, c.len);
    expect_input_error([&] { load_safetensors(f); }, f.string(), c.reason);
  }
  expect_input_error([&] { load_safetensors(dir / "missing.safetensors"); }, "missing.safetensors");
}

TEST(Safetensors, ByteFlipsInTheHeaderNeverCrash) {
  // Any corruption gives a clean InputError or a well-formed result, never another exception.
  const fs::path dir = testing::fresh_dir("flip");
  const fs::path good = dir / "good.safetensors";
  save_safetensors(good, {{"w", torch::randn({2, 3})}, {"i", torch::arange(3)}}, {{"k", "v"}});
  const std::string bytes = read_file(good);
  uint64_t header_len = 0;
  std::memcpy(&header_len, bytes.data(), 8);
  const fs::path f = dir / "flipped.safetensors";
  int rejected = 0;
  for (size_t pos = 0; pos < 8 + header_len; ++pos) {
    for (unsigned char value : {0x00, 0x22, 0x39, 0x7d, 0xff}) {
      std::string mutated = bytes;
      mutated[pos] = static_cast<char>(value);
      write_bytes(f, mutated);
      try {
        load_safetensors(f);
      } catch (const InputError&) {
        ++rejected;
      } catch (const std::exception& e) {
        ADD_FAILURE() << "byte " << pos << " = " << int(value) << ": " << e.what();
      }
    }
  }
  EXPECT_GT(rejected, 0);
}

}  // namespace
}  // namespace gradbox::model
