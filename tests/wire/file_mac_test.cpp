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
#include "forged_files.h"

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

// The tag is a wire format: a file signed on one machine must verify on every other, whatever
// its OpenSSL (3's EVP_MAC, or 1.1.1's signing-key Poly1305 on Debian 11). Known answer,
// computed once with OpenSSL 3.0; the two code paths must keep producing it.
TEST(FileMac, TheTagIsTheSameOnEveryOpenSsl) {
  const FileMac mac(kSecret);
  const FileMac::Tag tag = mac.tag("run-1", kRel, "0123456789abcdef", "the bytes before the tag");
  std::string hex;
  for (unsigned char c : tag) hex += "0123456789abcdef"[c >> 4], hex += "0123456789abcdef"[c & 15];
  EXPECT_EQ(hex, "c79b5b3dbf0a149365c642b2f19e4c5d");
  const std::string_view pieces[] = {"the bytes ", "before the tag"};
  EXPECT_EQ(mac.tag("run-1", kRel, "0123456789abcdef", pieces), tag);
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
  // Another tag or another signature with the trailer's checksum made right, or the trailer cut
  // off and the nonce dropped so that the file reads as unsigned.
  for (const size_t from_end : {size_t{8 + FileMac::kTagSize}, kTrailerSize}) {
    std::string other = genuine;
    other[other.size() - from_end] ^= 0x80;
    const uint64_t sum = checksum64(other.data() + other.size() - kTrailerSize, kTrailerSize - 8);
    std::memcpy(other.data() + other.size() - 8, &sum, 8);
    expect_signature_error(other, key, from_end == kTrailerSize ? "another signature" : "another tag");
  }
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

// Note [Member signatures]: what a member credential can and cannot write.

TEST(MemberSignatures, TheFileDigestIsTheSha256OfItsPiecesDigests) {
  // Note [Member signatures]'s definition, serially, against file_digest's threads.
  const auto reference = [](const std::string& bytes) {
    std::string list;
    const std::string_view context = "gradbox pieces 1";
    const uint64_t context_size = context.size(), size = bytes.size();
    list.append(reinterpret_cast<const char*>(&context_size), 8).append(context);
    list.append(reinterpret_cast<const char*>(&size), 8);
    for (size_t at = 0; at == 0 || at < bytes.size(); at += kDigestPiece) {
      const Key32 d = sha256(std::string_view(bytes).substr(at, kDigestPiece));
      list.append(reinterpret_cast<const char*>(d.data()), d.size());
    }
    return sha256(list);
  };
  for (const size_t size : {size_t{0}, size_t{1}, kDigestPiece - 1, kDigestPiece, kDigestPiece + 1, 3 * kDigestPiece + 17}) {
    std::string bytes(size, '\0');
    for (size_t i = 0; i < size; ++i) bytes[i] = static_cast<char>(i * 2654435761u >> 13);
    const Key32 digest = file_digest(bytes);
    EXPECT_EQ(digest, reference(bytes)) << size;
    if (size > 0) {
      bytes[size - 1] ^= 1;  // the last piece's last byte
      EXPECT_NE(file_digest(bytes), digest) << size;
    }
  }
  EXPECT_NE(file_digest(std::string(1, '\0')), file_digest(""));
}

TEST(MemberSignatures, TheDigestAndTheTagOfPiecesAreThoseOfTheirConcatenation) {
  // frame_pieces signs and tags a file's head, payload and trailer without joining them.
  const FileMac mac(kSecret);
  const std::string nonce(FileMac::kNonceSize, 'n');
  std::string bytes(3 * kDigestPiece + 17, '\0');
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<char>(i * 2654435761u >> 13);
  const std::string_view all = bytes;
  const Key32 digest = file_digest(all);
  const FileMac::Tag tag = mac.tag("run-1", kRel, nonce, all);
  for (const size_t first : {size_t{0}, size_t{1}, kDigestPiece - 1, kDigestPiece, kDigestPiece + 5})
    for (const size_t second : {first, 2 * kDigestPiece, bytes.size() - 3, bytes.size()}) {
      const std::string_view pieces[] = {all.substr(0, first), all.substr(first, second - first), all.substr(second)};
      EXPECT_EQ(file_digest(pieces), digest) << first << " " << second;
      EXPECT_EQ(mac.tag("run-1", kRel, nonce, pieces), tag) << first << " " << second;
    }
  const std::string_view none[] = {std::string_view()};
  EXPECT_EQ(file_digest(none), file_digest(""));
}

TEST(FileMac, AFileFramedAsPiecesIsTheFileFramedWhole) {
  const std::string payload(100000, 'p');
  // Unsigned: the same bytes, the payload never copied.
  const FramedPieces plain = frame_pieces(gradient_header(), payload);
  EXPECT_EQ(plain.payload.data(), payload.data());
  std::string joined;
  for (std::string_view piece : plain.pieces()) joined += piece;
  EXPECT_EQ(joined, frame(gradient_header(), payload));
  EXPECT_EQ(plain.size(), joined.size());
  EXPECT_TRUE(plain.trailer.empty());
  EXPECT_EQ(parse(joined, "f").header.SerializeAsString(), plain.header.SerializeAsString());
  // Signed (a fresh nonce each time, so not the same bytes): signature and tag hold for a
  // reader with the key, and the header returned is the one framed.
  const FileMac mac(kSecret);
  for (const std::string_view p : {std::string_view(payload), std::string_view()}) {
    const FramedPieces framed = frame_pieces(gradient_header(), p, FileKey{&mac, kRel});
    EXPECT_EQ(framed.trailer.size(), kTrailerSize);
    std::string bytes;
    for (std::string_view piece : framed.pieces()) bytes += piece;
    const WireFile file = parse(bytes, "f", FileKey{&mac, kRel});
    EXPECT_EQ(file.payload, p);
    EXPECT_EQ(file.header.SerializeAsString(), framed.header.SerializeAsString());
    EXPECT_EQ(verify_bytes(bytes).state, FileState::complete);
  }
}

RunSecret credential(const std::string& member) {
  return RunSecret::from_text(FileMac(kSecret).issue_credential(member), "credential-" + member);
}

TEST(MemberSignatures, CredentialsAndTheRunSecretReadEachOthersFiles) {
  const FileMac owner(kSecret), a(credential("a")), c(credential("c"));
  EXPECT_EQ(a.member(), "a");
  EXPECT_EQ(owner.member(), "");
  const std::string payload(5000, 's');
  // a's gradient, written with a's credential and with the run secret: every holder reads both.
  for (const FileMac* writer : {&a, &owner}) {
    const std::string bytes = frame(gradient_header(), payload, FileKey{writer, kRel});
    for (const FileMac* reader : {&owner, &a, &c}) {
      const WireFile file = parse(bytes, "f", FileKey{reader, kRel});
      EXPECT_EQ(file.payload, payload);
      EXPECT_EQ(file.header.member(), "a");
    }
  }
  // The same key for a either way: a credential is the run secret's keys for one member.
  EXPECT_EQ(owner.seal("a").public_key, a.seal("a").public_key);
  EXPECT_NE(owner.seal("a").public_key, owner.seal("c").public_key);
}

TEST(MemberSignatures, AMemberCannotWriteUnderAnothersName) {
  const FileMac owner(kSecret), c(credential("c"));
  // frame() signs as the header's writer; c's credential holds only c's key.
  EXPECT_THROW(frame(gradient_header(), "x", FileKey{&c, kRel}), std::logic_error);
  // By hand: a's header signed with c's key and certificate, the MAC right (c has its key).
  const std::string forged = signed_as(c, "c", gradient_header(), std::string(2048, 'f'), kRel);
  for (const FileMac* reader : {&owner, &c}) {
    try {
      parse(forged, "rounds/x", FileKey{reader, kRel});
      ADD_FAILURE() << "accepted";
    } catch (const SignatureError& e) {
      EXPECT_NE(std::string(e.what()).find("signed by member c but its header says a wrote it"), std::string::npos) << e.what();
    }
  }
  // The same with the member field set to a, key and certificate still c's.
  FileHeader h = gradient_header();
  std::string as_a = signed_as(c, "c", h, std::string(2048, 'f'), kRel);
  WireFile parsed = parse(as_a, "genuine");
  EXPECT_EQ(parsed.header.member(), "c");
  const std::string renamed = reframe(as_a, [](FileHeader& header, std::string&) { header.set_member("a"); });
  expect_signature_error(renamed, FileKey{&owner, kRel}, "c's key presented as a's");
}

TEST(MemberSignatures, AKeyTheOwnerDidNotCertifyIsRefused) {
  // Someone with the MAC key (every credential has it) certifies a key of its own for a, with an
  // owner key it made up: right MAC, right writer, valid signature, the wrong owner.
  const FileMac owner(kSecret);
  const FileMac impostor(RunSecret::from_text("an owner key nobody gave out, long", "t"));
  std::string bytes = signed_as(impostor, "a", gradient_header(), std::string(1000, 'i'), kRel);
  // Its MAC is the impostor's: made right with the real MAC key, which c's credential carries.
  const FileMac c(credential("c"));
  const size_t tag_at = bytes.size() - 8 - FileMac::kTagSize;
  const FileMac::Tag tag = c.tag("run-1", kRel, parse(bytes, "t").header.mac_nonce(), std::string_view(bytes).substr(0, tag_at));
  std::memcpy(bytes.data() + tag_at, tag.data(), tag.size());
  const uint64_t sum = checksum64(bytes.data() + bytes.size() - kTrailerSize, kTrailerSize - 8);
  std::memcpy(bytes.data() + bytes.size() - 8, &sum, 8);
  try {
    parse(bytes, "rounds/x", FileKey{&owner, kRel});
    ADD_FAILURE() << "accepted";
  } catch (const SignatureError& e) {
    EXPECT_NE(std::string(e.what()).find("not certified by this run's owner"), std::string::npos) << e.what();
  }
}

TEST(MemberSignatures, AFileOfAnOlderSignedVersionIsRefusedNamingTheVersion) {
  const FileMac owner(kSecret);
  const std::string genuine = frame(gradient_header(), std::string(100, 'v'), FileKey{&owner, kRel});
  std::string old = reframe(genuine, [](FileHeader& h, std::string&) { h.set_version(kMacOnlyWireVersion); });
  old.erase(old.size() - kTrailerSize, kTrailerSize - kMacOnlyTrailerSize);  // a version 2 trailer: tag and checksum
  const uint64_t sum = checksum64(old.data() + old.size() - kMacOnlyTrailerSize, FileMac::kTagSize);
  std::memcpy(old.data() + old.size() - 8, &sum, 8);
  ASSERT_EQ(verify_bytes(old).state, FileState::complete) << verify_bytes(old).reason;
  try {
    parse(old, "rounds/x", FileKey{&owner, kRel});
    ADD_FAILURE() << "accepted";
  } catch (const SignatureError& e) {
    EXPECT_NE(std::string(e.what()).find("wire version 2"), std::string::npos) << e.what();
  }
}

TEST(MemberSignatures, ACredentialIsCheckedAsItIsReadAndCannotMakeOthers) {
  const std::string text = FileMac(kSecret).issue_credential("b");
  EXPECT_TRUE(text.starts_with("gradbox-member-1:b:")) << text;
  EXPECT_EQ(FileMac(kSecret).issue_credential("b"), text);  // the same secret and name, the same credential
  const RunSecret b = RunSecret::from_text("  " + text + "\n", "b.secret");
  EXPECT_TRUE(b.is_member_credential());
  EXPECT_THROW(FileMac(b).issue_credential("d"), InputError);
  const auto refused = [](const std::string& damaged, const std::string& why) {
    try {
      RunSecret::from_text(damaged, "b.secret");
      ADD_FAILURE() << why << ": accepted";
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find("b.secret"), std::string::npos) << e.what();
    }
  };
  refused(text.substr(0, text.size() - 2), "cut short");
  std::string flipped = text;
  flipped[text.size() - 5] = flipped[text.size() - 5] == '0' ? '1' : '0';
  refused(flipped, "a certificate digit changed");
  std::string renamed = text;
  renamed.replace(std::string("gradbox-member-1:").size(), 1, "a");
  refused(renamed, "another name on b's key and certificate");
  refused("gradbox-member-1:b:00", "too few fields");
}

}  // namespace
}  // namespace gradbox::wire
