// Signed files (Note [Signed files] in wire/file_mac.h): what the tag binds (the run secret,
// the run, the file's name, every byte before it) and how a signed file frames: a reader with
// the key refuses anything a stranger could have written, before reading its payload.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <set>

#include "common/checksum.h"
#include "common/error.h"
#include "wire/envelope.h"

namespace gradbox::wire {
namespace {

namespace fs = std::filesystem;

const RunSecret kSecret = RunSecret::from_text("correct horse battery staple", "test");
const RunSecret kOtherSecret = RunSecret::from_text("another run's secret, also long", "test");
constexpr std::string_view kRel = "rounds/r00000007/g-a-s0-0123456789abcdef.gbx";

FileHeader gradient_header(uint64_t round = 7) {
  FileHeader h;
  h.set_run_id("run-1");
  h.set_model_fingerprint(42);
  GradientShard* g = h.mutable_gradient();
  g->set_round(round);
  g->set_worker("a");
  g->set_tokens(512);
  return h;
}

// A signed file's header edited and its framing (both checksums) made whole again, the tag
// kept: what someone without the key can do to a genuine file.
std::string reframe(const std::string& signed_bytes, const std::function<void(FileHeader&, std::string&)>& edit) {
  WireFile file = parse(signed_bytes, "genuine");
  const std::string trailer = signed_bytes.substr(signed_bytes.size() - kTrailerSize);
  edit(file.header, file.payload);
  file.header.set_payload_length(file.payload.size());
  file.header.set_payload_checksum(checksum64(file.payload.data(), file.payload.size()));
  std::string h;
  file.header.SerializeToString(&h);
  std::string out = "GRADBOX1";
  auto put = [&](auto v) { out.append(reinterpret_cast<const char*>(&v), sizeof v); };
  put(kFrameVersion);
  put(static_cast<uint32_t>(h.size()));
  put(checksum64(h.data(), h.size()));
  return out + h + file.payload + trailer;
}

void expect_signature_error(const std::string& bytes, FileKey key, const std::string& why) {
  try {
    parse(bytes, "rounds/x", key);
    ADD_FAILURE() << why << ": accepted";
  } catch (const SignatureError& e) {
    EXPECT_NE(std::string(e.what()).find("rounds/x"), std::string::npos) << e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << why << ": " << e.what() << " (not a SignatureError)";
  }
}

TEST(FileMac, ASignedFileRoundTripsAndReadsWithoutTheKeyToo) {
  const FileMac mac(kSecret);
  const std::string payload(100000, 'p');
  const std::string bytes = frame(gradient_header(), payload, FileKey{&mac, kRel});
  const Verification v = verify_bytes(bytes);
  ASSERT_EQ(v.state, FileState::complete) << v.reason;
  EXPECT_EQ(v.expected_size, bytes.size());
  EXPECT_EQ(verify_head(bytes.substr(0, head_size(bytes.substr(0, kPreambleSize))), bytes.size()).state, FileState::complete);
  for (const WireFile& file : {parse(bytes, "f", FileKey{&mac, kRel}), parse(std::string(bytes), "f", FileKey{&mac, kRel}),
                               parse(bytes, "f")}) {
    EXPECT_EQ(file.payload, payload);  // the tag is not part of it
    EXPECT_EQ(file.header.version(), kSignedWireVersion);
    EXPECT_EQ(file.header.mac_nonce().size(), FileMac::kNonceSize);
  }
  EXPECT_EQ(parse_view(bytes, "f", FileKey{&mac, kRel}).payload, payload);
  // On disk, as the syncer verifies a download: whole, one byte short, its tag damaged.
  const fs::path path = fs::path(testing::TempDir()) / "gradbox-signed.gbx";
  std::ofstream(path, std::ios::binary) << bytes;
  EXPECT_EQ(verify_file(path).state, FileState::complete);
  std::ofstream(path, std::ios::binary) << bytes.substr(0, bytes.size() - 1);
  EXPECT_EQ(verify_file(path).state, FileState::incomplete);
  std::string damaged = bytes;
  damaged[damaged.size() - kTrailerSize + 3] ^= 0x10;
  std::ofstream(path, std::ios::binary) << damaged;
  EXPECT_EQ(verify_file(path).state, FileState::corrupt);
  fs::remove(path);
  // A fresh nonce each time: the same content never gets the same key twice.
  const std::string again = frame(gradient_header(), payload, FileKey{&mac, kRel});
  EXPECT_NE(parse(again, "f").header.mac_nonce(), parse(bytes, "f").header.mac_nonce());
}

TEST(FileMac, EveryPrefixOfASignedFileIsIncompleteAndALongerOneCorrupt) {
  const FileMac mac(kSecret);
  const std::string bytes = frame(gradient_header(), std::string(300, 'q'), FileKey{&mac, kRel});
  for (size_t n = 0; n < bytes.size(); ++n)
    ASSERT_EQ(verify_bytes(bytes.substr(0, n)).state, FileState::incomplete) << n;
  EXPECT_EQ(verify_bytes(bytes + "x").state, FileState::corrupt);
}

TEST(FileMac, WhatAStrangerCanWriteIsRefusedBeforeItIsRead) {
  const FileMac mac(kSecret);
  const FileKey key{&mac, kRel};
  const std::string genuine = frame(gradient_header(), std::string(4096, 'g'), key);
  ASSERT_NO_THROW(parse(genuine, "rounds/x", key));
  // Forged: valid framing and checksums, no tag.
  expect_signature_error(frame(gradient_header(), std::string(4096, 'f')), key, "unsigned");
  // Tagged with another run's secret.
  const FileMac other(kOtherSecret);
  expect_signature_error(frame(gradient_header(), std::string(4096, 'f'), FileKey{&other, kRel}), key, "other secret");
  // Altered: one payload byte, the checksums made right again.
  expect_signature_error(reframe(genuine, [](FileHeader&, std::string& p) { p[100] ^= 1; }), key, "altered payload");
  // Altered header: more tokens claimed, or another round.
  expect_signature_error(reframe(genuine, [](FileHeader& h, std::string&) { h.mutable_gradient()->set_tokens(1 << 30); }),
                         key, "altered tokens");
  // Replayed: the genuine bytes under another name (another round's, another member's) ...
  expect_signature_error(genuine, FileKey{&mac, "rounds/r00000009/g-a-s0-0123456789abcdef.gbx"}, "moved to a later round");
  expect_signature_error(genuine, FileKey{&mac, "rounds/r00000007/g-b-s0-0123456789abcdef.gbx"}, "moved to b's name");
  // ... or with its round rewritten to pass the reader's header check.
  expect_signature_error(reframe(genuine, [](FileHeader& h, std::string&) { h.mutable_gradient()->set_round(9); }),
                         FileKey{&mac, "rounds/r00000009/g-a-s0-0123456789abcdef.gbx"}, "replayed with its round rewritten");
  // Another run under the same secret (the run id is bound too, besides being checked).
  expect_signature_error(reframe(genuine, [](FileHeader& h, std::string&) { h.set_run_id("run-2"); }), key, "other run");
  // Another tag with its checksum made right, or the tag cut off and the nonce dropped so that the
  // file reads as unsigned.
  std::string other_tag = genuine;
  other_tag[other_tag.size() - kTrailerSize] ^= 0x80;
  const uint64_t sum = checksum64(other_tag.data() + other_tag.size() - kTrailerSize, FileMac::kTagSize);
  std::memcpy(other_tag.data() + other_tag.size() - 8, &sum, 8);
  expect_signature_error(other_tag, key, "another tag");
  const std::string stripped = reframe(genuine, [](FileHeader& h, std::string&) { h.clear_mac_nonce(); });
  expect_signature_error(stripped.substr(0, stripped.size() - kTrailerSize), key, "stripped");
  // A tag damaged in transit is damage, not forgery: corrupt, so that the copy is fetched again.
  for (size_t at = genuine.size() - kTrailerSize; at < genuine.size(); ++at) {
    std::string damaged = genuine;
    damaged[at] ^= 0x01;
    EXPECT_EQ(verify_bytes(damaged).state, FileState::corrupt) << at;
  }
}

TEST(FileMac, TheSecretIsChecked) {
  EXPECT_THROW(RunSecret::from_text("  short \n", "secret.txt"), InputError);
  try {
    RunSecret::from_text("0123456789", "secret.txt");
    FAIL();
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("secret.txt"), std::string::npos) << e.what();
  }
  EXPECT_EQ(RunSecret::from_text("  0123456789abcdef\n", "t").text(), "0123456789abcdef");
  std::set<std::string> made;
  for (int i = 0; i < 4; ++i) {
    const RunSecret s = RunSecret::generate();
    EXPECT_EQ(s.text().size(), 64u);
    EXPECT_EQ(s.text().find_first_not_of("0123456789abcdef"), std::string::npos);
    made.insert(s.text());
  }
  EXPECT_EQ(made.size(), 4u);
}

TEST(FileMac, TheSecretComesFromItsFileElseTheEnvironment) {
  const fs::path file = fs::path(testing::TempDir()) / "gradbox-secret.txt";
  std::ofstream(file) << "from the file, long enough\n";
  ::setenv(RunSecret::kEnvironmentVariable, "from the environment, long enough", 1);
  EXPECT_EQ(RunSecret::find(file)->text(), "from the file, long enough");
  EXPECT_EQ(RunSecret::find(std::nullopt)->text(), "from the environment, long enough");
  ::unsetenv(RunSecret::kEnvironmentVariable);
  EXPECT_FALSE(RunSecret::find(std::nullopt).has_value());
  EXPECT_THROW(RunSecret::find(fs::path(testing::TempDir()) / "no-such-secret"), InputError);
  fs::remove(file);
}

}  // namespace
}  // namespace gradbox::wire
