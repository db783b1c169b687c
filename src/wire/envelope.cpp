#include "wire/envelope.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <optional>
#include <vector>

#include "common/atomic_file.h"
#include "common/checksum.h"
#include "common/error.h"

namespace gradbox::wire {
namespace {

constexpr char kMagic[8] = {'G', 'R', 'A', 'D', 'B', 'O', 'X', '1'};

template <class T>
T load_le(const char* p) {
  T value;
  std::memcpy(&value, p, sizeof(T));  // x86/ARM hosts are little-endian, as the format is
  return value;
}

template <class T>
void append_le(std::string& out, T value) {
  out.append(reinterpret_cast<const char*>(&value), sizeof(T));
}

Verification result(FileState state, std::string reason, uint64_t expected = 0) {
  return Verification{state, std::move(reason), expected};
}

// The preamble and header of a file whose first bytes are `bytes` (and maybe more after them,
// not given): nullopt when they are whole and sound, with the header parsed and its size set;
// otherwise why not.
std::optional<Verification> check_head(std::string_view bytes, FileHeader& header, size_t& header_size) {
  if (bytes.size() < kPreambleSize) {
    // A 0-byte placeholder or the first bytes of an upload; unless the magic is already wrong.
    size_t n = std::min(bytes.size(), sizeof(kMagic));
    if (std::memcmp(bytes.data(), kMagic, n) != 0) return result(FileState::corrupt, "not a gradbox file (bad magic)");
    return result(FileState::incomplete, str("only ", bytes.size(), " bytes, shorter than the 24-byte preamble"));
  }
  if (std::memcmp(bytes.data(), kMagic, sizeof(kMagic)) != 0)
    return result(FileState::corrupt, "not a gradbox file (bad magic)");
  uint32_t frame_version = load_le<uint32_t>(bytes.data() + 8);
  if (frame_version != kFrameVersion)
    return result(FileState::unsupported, str("frame version ", frame_version, ", this build reads ", kFrameVersion));
  header_size = load_le<uint32_t>(bytes.data() + 12);
  uint64_t header_sum = load_le<uint64_t>(bytes.data() + 16);
  if (header_size > kMaxHeaderSize)
    return result(FileState::corrupt, str("header length ", header_size, " exceeds ", kMaxHeaderSize));
  if (bytes.size() < kPreambleSize + header_size)
    return result(FileState::incomplete, str("only ", bytes.size(), " bytes, header ends at ", kPreambleSize + header_size));
  std::string_view header_bytes = bytes.substr(kPreambleSize, header_size);
  if (checksum64(header_bytes.data(), header_bytes.size()) != header_sum)
    return result(FileState::corrupt, "header checksum mismatch");
  if (!header.ParseFromArray(header_bytes.data(), static_cast<int>(header_bytes.size())))
    return result(FileState::corrupt, "header does not parse");
  if (header.version() == 0 || header.version() > kWireVersion)
    return result(FileState::unsupported, str("wire version ", header.version(), ", this build reads 1..", kWireVersion));
  if (!header.mac_nonce().empty() && header.mac_nonce().size() != FileMac::kNonceSize)
    return result(FileState::corrupt, str("MAC nonce of ", header.mac_nonce().size(), " bytes"));
  if (!header.mac_nonce().empty() && header.version() >= kSignedWireVersion &&
      (header.member_public_key().size() != PublicKey{}.size() || header.member_certificate().size() != Signature{}.size()))
    return result(FileState::corrupt, str("a member key of ", header.member_public_key().size(),
                                          " bytes or a certificate of ", header.member_certificate().size()));
  if (header.payload_length() > kMaxPayloadSize) {
    Verification v = result(FileState::corrupt, str("the header declares a payload of ", header.payload_length(),
                                                    " bytes, more than any gradbox file (", kMaxPayloadSize, ")"));
    v.hopeless = true;
    return v;
  }
  return std::nullopt;
}

// The trailer after the payload, in a signed file.
uint64_t trailer_size(const FileHeader& header) {
  if (header.mac_nonce().empty()) return 0;
  return header.version() == kMacOnlyWireVersion ? kMacOnlyTrailerSize : kTrailerSize;
}

// A trailer's signature and tag against their checksum.
bool trailer_intact(std::string_view trailer) {
  const size_t summed = trailer.size() - 8;
  return checksum64(trailer.data(), summed) == load_le<uint64_t>(trailer.data() + summed);
}

// What a sound head says the whole file's size is.
uint64_t declared_size(const FileHeader& header, size_t header_size) {
  return kPreambleSize + header_size + header.payload_length() + trailer_size(header);
}

// A file of `size` bytes against the length its header declares.
std::optional<Verification> check_size(uint64_t size, uint64_t expected) {
  if (size < expected) return result(FileState::incomplete, str("only ", size, " of ", expected, " bytes"), expected);
  if (size > expected) return result(FileState::corrupt, str(size, " bytes, but the header declares ", expected), expected);
  return std::nullopt;
}

// Verifies and, when complete, parses the header into *header.
Verification verify_impl(std::string_view bytes, FileHeader* header) {
  FileHeader parsed;
  size_t header_size = 0;
  if (std::optional<Verification> bad = check_head(bytes, parsed, header_size)) return *bad;
  const uint64_t expected = declared_size(parsed, header_size);
  if (std::optional<Verification> bad = check_size(bytes.size(), expected)) return *bad;
  std::string_view payload = bytes.substr(kPreambleSize + header_size, parsed.payload_length());
  if (checksum64(payload.data(), payload.size()) != parsed.payload_checksum())
    return result(FileState::corrupt, "payload checksum mismatch", expected);
  if (trailer_size(parsed) > 0 && !trailer_intact(bytes.substr(bytes.size() - trailer_size(parsed))))
    return result(FileState::corrupt, "MAC tag checksum mismatch", expected);
  if (header) *header = std::move(parsed);
  return result(FileState::complete, "", expected);
}

}  // namespace

Verification verify_head(std::string_view first, uint64_t file_size) {
  FileHeader header;
  size_t header_size = 0;
  if (std::optional<Verification> bad = check_head(first, header, header_size)) return *bad;
  const uint64_t expected = declared_size(header, header_size);
  if (std::optional<Verification> bad = check_size(file_size, expected)) return *bad;
  return result(FileState::complete, "", expected);
}

size_t head_size(std::string_view first) {
  if (first.size() < kPreambleSize) return kPreambleSize;
  const size_t declared = load_le<uint32_t>(first.data() + 12);
  return declared <= kMaxHeaderSize ? kPreambleSize + declared : kPreambleSize;
}

const char* file_state_name(FileState state) {
  switch (state) {
    case FileState::complete: return "complete";
    case FileState::incomplete: return "incomplete";
    case FileState::corrupt: return "corrupt";
    case FileState::unsupported: return "unsupported";
  }
  return "?";
}

std::string frame(FileHeader header, std::string_view payload, FileKey key) {
  std::string out;
  frame_into(std::move(header), payload, out, key);
  return out;
}

FramedPieces frame_pieces(FileHeader header, std::string_view payload, FileKey key) {
  header.set_version(key.mac ? kSignedWireVersion : kUnsignedWireVersion);
  header.clear_mac_nonce();
  header.clear_member();
  header.clear_member_public_key();
  header.clear_member_certificate();
  if (key.mac) {
    header.set_mac_nonce(FileMac::new_nonce());
    const std::string_view writer = writer_of(header);
    header.set_member(writer.empty() ? key.mac->member() : std::string(writer));
    const FileMac::Seal seal = key.mac->seal(header.member());
    header.set_member_public_key(seal.public_key.data(), seal.public_key.size());
    header.set_member_certificate(seal.certificate.data(), seal.certificate.size());
  }
  header.set_payload_length(payload.size());
  header.set_payload_checksum(checksum64(payload.data(), payload.size()));
  FramedPieces out;
  std::string header_bytes;
  GB_CHECK(header.SerializeToString(&header_bytes), "FileHeader does not serialise");
  GB_CHECK(header_bytes.size() <= kMaxHeaderSize, "header of ", header_bytes.size(), " bytes");
  out.head.reserve(kPreambleSize + header_bytes.size());
  out.head.append(kMagic, sizeof(kMagic));
  append_le<uint32_t>(out.head, kFrameVersion);
  append_le<uint32_t>(out.head, static_cast<uint32_t>(header_bytes.size()));
  append_le<uint64_t>(out.head, checksum64(header_bytes.data(), header_bytes.size()));
  out.head += header_bytes;
  out.payload = payload;
  if (key.mac) {
    const std::string_view signed_pieces[] = {out.head, payload};
    const Signature signature = key.mac->sign(header.member(), header.run_id(), key.rel, file_digest(signed_pieces));
    out.trailer.append(reinterpret_cast<const char*>(signature.data()), signature.size());
    const std::string_view tagged_pieces[] = {out.head, payload, out.trailer};
    const FileMac::Tag tag = key.mac->tag(header.run_id(), key.rel, header.mac_nonce(), tagged_pieces);
    out.trailer.append(reinterpret_cast<const char*>(tag.data()), tag.size());
    append_le<uint64_t>(out.trailer, checksum64(out.trailer.data(), out.trailer.size()));  // of signature and tag
  }
  out.header = std::move(header);
  return out;
}

void frame_into(FileHeader header, std::string_view payload, std::string& out, FileKey key) {
  const FramedPieces framed = frame_pieces(std::move(header), payload, key);
  out.clear();
  out.reserve(framed.size());
  for (std::string_view piece : framed.pieces()) out += piece;
}

Verification verify_bytes(std::string_view bytes) { return verify_impl(bytes, nullptr); }

Verification verify_file(const fs::path& path) {
  std::error_code ec;
  if (!fs::is_regular_file(path, ec)) return result(FileState::incomplete, "no such file");
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return result(FileState::incomplete, str("cannot open: ", std::strerror(errno)));
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  // Reads up to `want` bytes at `offset` (fewer at the file's end); nullopt on a read error.
  auto read_at = [fd](uint64_t offset, char* into, size_t want) -> std::optional<size_t> {
    size_t got = 0;
    while (got < want) {
      const ssize_t r = ::pread(fd, into + got, want - got, static_cast<off_t>(offset + got));
      if (r < 0 && errno == EINTR) continue;
      if (r < 0) return std::nullopt;
      if (r == 0) break;
      got += static_cast<size_t>(r);
    }
    return got;
  };
  const auto read_failed = [] { return result(FileState::incomplete, str("read failed: ", std::strerror(errno))); };
  std::string head(kPreambleSize, '\0');
  std::optional<size_t> got = read_at(0, head.data(), head.size());
  if (!got) return read_failed();
  head.resize(*got);
  if (head.size() == kPreambleSize && head_size(head) > kPreambleSize) {
    const size_t declared = head_size(head) - kPreambleSize;
    head.resize(kPreambleSize + declared);
    if (!(got = read_at(kPreambleSize, head.data() + kPreambleSize, declared))) return read_failed();
    head.resize(kPreambleSize + *got);
  }
  FileHeader header;
  size_t header_size = 0;
  if (std::optional<Verification> bad = check_head(head, header, header_size)) return *bad;
  const uint64_t expected = declared_size(header, header_size);
  const uint64_t payload_end = expected - trailer_size(header);
  // The payload in pieces, then the tag (not checked here: that takes the key) and one byte past
  // the declared end: the length the reads reach is the file's length, as a whole read's would be.
  Checksum64Stream sum;
  thread_local std::vector<char> piece(size_t{1} << 20);
  uint64_t offset = kPreambleSize + header_size;
  while (offset < payload_end) {
    const size_t want = static_cast<size_t>(std::min<uint64_t>(piece.size(), payload_end - offset));
    if (!(got = read_at(offset, piece.data(), want))) return read_failed();
    sum.update(piece.data(), *got);
    offset += *got;
    if (*got < want) break;
  }
  char trailer[kTrailerSize + 1];
  if (offset == payload_end) {
    if (!(got = read_at(offset, trailer, expected - payload_end + 1))) return read_failed();
    offset += *got;
  }
  if (std::optional<Verification> bad = check_size(offset, expected)) return *bad;
  if (sum.digest() != header.payload_checksum()) return result(FileState::corrupt, "payload checksum mismatch", expected);
  if (trailer_size(header) > 0 && !trailer_intact(std::string_view(trailer, trailer_size(header))))
    return result(FileState::corrupt, "MAC tag checksum mismatch", expected);
  return result(FileState::complete, "", expected);
}

namespace {

// Verifies a complete file's framing and, with a key, its tag; returns where its payload starts.
size_t check_file(std::string_view bytes, const std::string& origin, FileKey key, FileHeader& header) {
  Verification v = verify_impl(bytes, &header);
  if (v.state != FileState::complete)
    throw WireError(str(origin, ": ", file_state_name(v.state), " gradbox file: ", v.reason));
  if (key.mac) {
    if (header.mac_nonce().empty())
      throw SignatureError(str(origin, ": unsigned file in a signed run (written without the run secret)"));
    if (header.version() < kSignedWireVersion)
      throw SignatureError(str(origin, ": signed by a gradbox older than member signatures (wire version ",
                               header.version(), "); every member of a run needs this version"));
    // The MAC first: a stranger's file costs one pass of Poly1305, not a SHA-256 and two Ed25519 checks.
    const size_t tag_at = bytes.size() - 8 - FileMac::kTagSize, signature_at = tag_at - Signature{}.size();
    if (!FileMac::equal(key.mac->tag(header.run_id(), key.rel, header.mac_nonce(), bytes.substr(0, tag_at)),
                        bytes.substr(tag_at, FileMac::kTagSize)))
      throw SignatureError(str(origin, ": MAC tag does not match: forged, altered, moved from another name, or "
                                       "signed with another run secret"));
    const std::string_view writer = writer_of(header);
    if (!writer.empty() && header.member() != writer)
      throw SignatureError(str(origin, ": signed by member ", header.member(), " but its header says ", writer,
                               " wrote it: a member writing under another's name"));
    const std::string why = key.mac->check(header.member(), header.member_public_key(), header.member_certificate(),
                                           header.run_id(), key.rel, file_digest(bytes.substr(0, signature_at)),
                                           bytes.substr(signature_at, Signature{}.size()));
    if (!why.empty()) throw SignatureError(str(origin, ": ", why));
  }
  return kPreambleSize + load_le<uint32_t>(bytes.data() + 12);
}

}  // namespace

WireView parse_view(std::string_view bytes, const std::string& origin, FileKey key) {
  WireView view;
  const size_t payload_at = check_file(bytes, origin, key, view.header);
  view.payload = bytes.substr(payload_at, view.header.payload_length());
  return view;
}

WireFile parse(std::string_view bytes, const std::string& origin, FileKey key) {
  WireView view = parse_view(bytes, origin, key);
  return WireFile{std::move(view.header), std::string(view.payload)};
}

WireFile parse(std::string&& bytes, const std::string& origin, FileKey key) {
  WireFile file;
  const size_t payload_at = check_file(bytes, origin, key, file.header);
  // The payload moves down over the preamble and header in place: no second buffer of its size.
  bytes.erase(0, payload_at);
  bytes.resize(file.header.payload_length());  // without the trailer
  file.payload = std::move(bytes);
  return file;
}

WireFile read_wire_file(const fs::path& path) {
  std::string bytes;
  try {
    bytes = read_file(path);
  } catch (const InputError& e) {
    throw WireError(e.what());
  }
  return parse(std::move(bytes), path.string());
}

std::string_view writer_of(const FileHeader& header) {
  switch (header.body_case()) {
    case FileHeader::kGradient: return header.gradient().worker();
    case FileHeader::kCommit: return header.commit().owner();
    case FileHeader::kHeartbeat: return header.heartbeat().worker();
    case FileHeader::kFingerprint: return header.fingerprint().worker();
    case FileHeader::kCheckpointPart: return header.checkpoint_part().publisher();
    case FileHeader::kCheckpointManifest: return header.checkpoint_manifest().publisher();
    case FileHeader::kRunConfig: return header.run_config().worker();
    case FileHeader::BODY_NOT_SET: return {};
  }
  return {};
}

void check_identity(const FileHeader& header, const std::string& run_id, uint64_t model_fingerprint,
                    const std::string& origin) {
  if (header.run_id() != run_id)
    throw WireError(str(origin, ": belongs to run '", header.run_id(), "', not to this run '", run_id, "'"));
  if (header.model_fingerprint() != model_fingerprint)
    throw WireError(str(origin, ": written for model ", to_hex64(header.model_fingerprint()),
                        ", this run's model is ", to_hex64(model_fingerprint)));
}

}  // namespace gradbox::wire
