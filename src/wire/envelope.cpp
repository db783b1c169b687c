#include "wire/envelope.h"

#include <cstring>

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

// Verifies and, when complete, parses the header into *header.
Verification verify_impl(std::string_view bytes, FileHeader* header) {
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
  uint32_t header_size = load_le<uint32_t>(bytes.data() + 12);
  uint64_t header_sum = load_le<uint64_t>(bytes.data() + 16);
  if (header_size > kMaxHeaderSize)
    return result(FileState::corrupt, str("header length ", header_size, " exceeds ", kMaxHeaderSize));
  if (bytes.size() < kPreambleSize + header_size)
    return result(FileState::incomplete, str("only ", bytes.size(), " bytes, header ends at ", kPreambleSize + header_size));
  std::string_view header_bytes = bytes.substr(kPreambleSize, header_size);
  if (checksum64(header_bytes.data(), header_bytes.size()) != header_sum)
    return result(FileState::corrupt, "header checksum mismatch");
  FileHeader parsed;
  if (!parsed.ParseFromArray(header_bytes.data(), static_cast<int>(header_bytes.size())))
    return result(FileState::corrupt, "header does not parse");
  if (parsed.version() == 0 || parsed.version() > kWireVersion)
    return result(FileState::unsupported, str("wire version ", parsed.version(), ", this build reads 1..", kWireVersion));
  uint64_t expected = kPreambleSize + header_size + parsed.payload_length();
  if (bytes.size() < expected)
    return result(FileState::incomplete, str("only ", bytes.size(), " of ", expected, " bytes"), expected);
  if (bytes.size() > expected)
    return result(FileState::corrupt, str(bytes.size(), " bytes, but the header declares ", expected), expected);
  std::string_view payload = bytes.substr(kPreambleSize + header_size);
  if (checksum64(payload.data(), payload.size()) != parsed.payload_checksum())
    return result(FileState::corrupt, "payload checksum mismatch", expected);
  if (header) *header = std::move(parsed);
  return result(FileState::complete, "", expected);
}

}  // namespace

const char* file_state_name(FileState state) {
  switch (state) {
    case FileState::complete: return "complete";
    case FileState::incomplete: return "incomplete";
    case FileState::corrupt: return "corrupt";
    case FileState::unsupported: return "unsupported";
  }
  return "?";
}

std::string frame(FileHeader header, std::string_view payload) {
  header.set_version(kWireVersion);
  header.set_payload_length(payload.size());
  header.set_payload_checksum(checksum64(payload.data(), payload.size()));
  std::string header_bytes;
  GB_CHECK(header.SerializeToString(&header_bytes), "FileHeader does not serialise");
  GB_CHECK(header_bytes.size() <= kMaxHeaderSize, "header of ", header_bytes.size(), " bytes");
  std::string out;
  out.reserve(kPreambleSize + header_bytes.size() + payload.size());
  out.append(kMagic, sizeof(kMagic));
  append_le<uint32_t>(out, kFrameVersion);
  append_le<uint32_t>(out, static_cast<uint32_t>(header_bytes.size()));
  append_le<uint64_t>(out, checksum64(header_bytes.data(), header_bytes.size()));
  out += header_bytes;
  out += payload;
  return out;
}

Verification verify_bytes(std::string_view bytes) { return verify_impl(bytes, nullptr); }

Verification verify_file(const fs::path& path) {
  std::error_code ec;
  if (!fs::is_regular_file(path, ec)) return result(FileState::incomplete, "no such file");
  std::string bytes;
  try {
    bytes = read_file(path);
  } catch (const InputError& e) {
    return result(FileState::incomplete, e.what());  // vanished or unreadable for now
  }
  return verify_bytes(bytes);
}

WireFile parse(std::string_view bytes, const std::string& origin) {
  WireFile file;
  Verification v = verify_impl(bytes, &file.header);
  if (v.state != FileState::complete)
    throw WireError(str(origin, ": ", file_state_name(v.state), " gradbox file: ", v.reason));
  size_t header_size = load_le<uint32_t>(bytes.data() + 12);
  file.payload.assign(bytes.substr(kPreambleSize + header_size));
  return file;
}

WireFile parse(std::string&& bytes, const std::string& origin) {
  WireFile file;
  Verification v = verify_impl(bytes, &file.header);
  if (v.state != FileState::complete)
    throw WireError(str(origin, ": ", file_state_name(v.state), " gradbox file: ", v.reason));
  // The payload moves down over the preamble and header in place: no second buffer of its size.
  bytes.erase(0, kPreambleSize + load_le<uint32_t>(bytes.data() + 12));
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

void check_identity(const FileHeader& header, const std::string& run_id, uint64_t model_fingerprint,
                    const std::string& origin) {
  if (header.run_id() != run_id)
    throw WireError(str(origin, ": belongs to run '", header.run_id(), "', not to this run '", run_id, "'"));
  if (header.model_fingerprint() != model_fingerprint)
    throw WireError(str(origin, ": written for model ", to_hex64(header.model_fingerprint()),
                        ", this run's model is ", to_hex64(model_fingerprint)));
}

}  // namespace gradbox::wire
