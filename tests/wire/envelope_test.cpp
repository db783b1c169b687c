// The framing every shared-folder file has: complete vs incomplete vs corrupt vs unsupported,
// and files of another run or model refused with the file named.
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>

#include "common/checksum.h"
#include "wire/envelope.h"

namespace gradbox::wire {
namespace {

namespace fs = std::filesystem;

FileHeader gradient_header() {
  FileHeader h;
  h.set_run_id("run-1");
  h.set_model_fingerprint(42);
  GradientShard* g = h.mutable_gradient();
  g->set_round(7);
  g->set_worker("a");
  g->set_tokens(512);
  g->mutable_codec()->set_codec("fp16");
  return h;
}

// Frames `header` by hand, so a test can write what frame() never would (a future version).
std::string frame_raw(const FileHeader& header, const std::string& payload, uint32_t frame_version = kFrameVersion) {
  std::string h;
  header.SerializeToString(&h);
  std::string out = "GRADBOX1";
  auto put = [&](auto v) { out.append(reinterpret_cast<const char*>(&v), sizeof v); };
  put(frame_version);
  put(static_cast<uint32_t>(h.size()));
  put(checksum64(h.data(), h.size()));
  return out + h + payload;
}

TEST(Envelope, RoundTrip) {
  const std::string payload(1000, 'x');
  const std::string bytes = frame(gradient_header(), payload);
  const Verification v = verify_bytes(bytes);
  EXPECT_EQ(v.state, FileState::complete) << v.reason;
  EXPECT_EQ(v.expected_size, bytes.size());
  WireFile file = parse(bytes, "f");
  EXPECT_EQ(file.payload, payload);
  EXPECT_EQ(file.header.version(), kUnsignedWireVersion);  // readable by builds before signing
  EXPECT_EQ(file.header.payload_length(), payload.size());
  EXPECT_EQ(file.header.gradient().round(), 7u);
  EXPECT_EQ(file.header.gradient().worker(), "a");
  // Taking the bytes over (the payload keeps their buffer) parses the same.
  const WireFile moved = parse(std::string(bytes), "f");
  EXPECT_EQ(moved.payload, payload);
  EXPECT_EQ(moved.header.SerializeAsString(), file.header.SerializeAsString());
}

TEST(Envelope, EveryPrefixIsIncompleteNeverComplete) {
  const std::string bytes = frame(gradient_header(), std::string(200, 'p'));
  for (size_t n = 0; n < bytes.size(); ++n) {
    const Verification v = verify_bytes(std::string_view(bytes).substr(0, n));
    EXPECT_EQ(v.state, FileState::incomplete) << "prefix " << n << ": " << v.reason;
    EXPECT_THROW(parse(bytes.substr(0, n), "f"), WireError);
  }
}

TEST(Envelope, EveryFlippedByteIsCaught) {
  const std::string bytes = frame(gradient_header(), std::string(64, 'p'));
  for (size_t i = 0; i < bytes.size(); ++i) {
    std::string bad = bytes;
    bad[i] ^= 0x10;
    const Verification v = verify_bytes(bad);
    // A flip in the length fields can also make the file look longer (incomplete) or newer
    // (unsupported); what matters is that it is never taken as complete.
    EXPECT_NE(v.state, FileState::complete) << "byte " << i;
  }
  std::string payload_flip = bytes;
  payload_flip.back() ^= 1;
  EXPECT_EQ(verify_bytes(payload_flip).state, FileState::corrupt);
  EXPECT_EQ(verify_bytes(payload_flip).reason, "payload checksum mismatch");
}

// The copier's first look: from the first head_size() bytes and the file's size alone, a file
// still arriving is incomplete at every length, and only the declared length can be whole.
TEST(Envelope, TheHeadAloneTellsAFileStillArrivingFromAWholeOne) {
  const std::string bytes = frame(gradient_header(), std::string(200, 'p'));
  const size_t head = head_size(bytes);
  EXPECT_EQ(head_size(bytes.substr(0, kPreambleSize - 1)), kPreambleSize);
  EXPECT_GT(head, kPreambleSize);
  EXPECT_LT(head, bytes.size());
  for (size_t size = 0; size < bytes.size(); ++size) {
    const std::string_view first = std::string_view(bytes).substr(0, std::min(size, head));
    const Verification v = verify_head(first, size);
    EXPECT_EQ(v.state, FileState::incomplete) << "size " << size << ": " << v.reason;
  }
  const Verification whole = verify_head(std::string_view(bytes).substr(0, head), bytes.size());
  EXPECT_EQ(whole.state, FileState::complete) << whole.reason;
  EXPECT_EQ(whole.expected_size, bytes.size());
  EXPECT_EQ(verify_head(std::string_view(bytes).substr(0, head), bytes.size() + 1).state, FileState::corrupt);
  // A damaged header is not mistaken for one still arriving.
  std::string bad = bytes.substr(0, head);
  bad[head - 1] ^= 0x10;
  EXPECT_EQ(verify_head(bad, bytes.size()).state, FileState::corrupt);
  EXPECT_EQ(verify_head("PK\x03\x04", 1000).state, FileState::corrupt);
}

TEST(Envelope, TrailingBytesAndForeignFilesAreCorrupt) {
  const std::string bytes = frame(gradient_header(), "abc");
  EXPECT_EQ(verify_bytes(bytes + "z").state, FileState::corrupt);
  EXPECT_EQ(verify_bytes("PK\x03\x04 a zip file, not ours").state, FileState::corrupt);
  EXPECT_EQ(verify_bytes("").state, FileState::incomplete);  // a 0-byte placeholder
}

TEST(Envelope, NewerVersionsAreUnsupportedWithTheVersionNamed) {
  FileHeader h = gradient_header();
  h.set_version(99);
  h.set_payload_length(3);
  h.set_payload_checksum(checksum64("abc", 3));
  Verification v = verify_bytes(frame_raw(h, "abc"));
  EXPECT_EQ(v.state, FileState::unsupported);
  EXPECT_NE(v.reason.find("99"), std::string::npos) << v.reason;
  h.set_version(kWireVersion);
  v = verify_bytes(frame_raw(h, "abc", 7));
  EXPECT_EQ(v.state, FileState::unsupported);
  EXPECT_NE(v.reason.find("frame version 7"), std::string::npos) << v.reason;
  try {
    parse(frame_raw(h, "abc", 7), "rounds/r1/g-a-s0.gbx");
    FAIL();
  } catch (const WireError& e) {
    EXPECT_NE(std::string(e.what()).find("rounds/r1/g-a-s0.gbx"), std::string::npos) << e.what();
  }
}

TEST(Envelope, AnotherRunOrModelIsRefusedNamingTheFile) {
  const FileHeader h = gradient_header();
  EXPECT_NO_THROW(check_identity(h, "run-1", 42, "f"));
  try {
    check_identity(h, "run-2", 42, "/shared/rounds/r7/g-a-s0.gbx");
    FAIL();
  } catch (const WireError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("/shared/rounds/r7/g-a-s0.gbx"), std::string::npos) << what;
    EXPECT_NE(what.find("run-1"), std::string::npos) << what;
  }
  try {
    check_identity(h, "run-1", 43, "g.gbx");
    FAIL();
  } catch (const WireError& e) {
    EXPECT_NE(std::string(e.what()).find("model"), std::string::npos) << e.what();
  }
}

TEST(Envelope, FilesOnDisk) {
  const fs::path path = fs::temp_directory_path() / ("gradbox_wire_" + std::to_string(::getpid()) + ".gbx");
  const std::string bytes = frame(gradient_header(), "payload");
  std::ofstream(path, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size() - 2));
  EXPECT_EQ(verify_file(path).state, FileState::incomplete);
  std::ofstream(path, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  EXPECT_EQ(verify_file(path).state, FileState::complete);
  EXPECT_EQ(read_wire_file(path).payload, "payload");
  fs::remove(path);
  EXPECT_EQ(verify_file(path).state, FileState::incomplete);
  try {
    read_wire_file(path);
    FAIL();
  } catch (const WireError& e) {
    EXPECT_NE(std::string(e.what()).find(path.string()), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace gradbox::wire
