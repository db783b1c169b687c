#pragma once
// Framing of every file in the shared folder (see proto/gradbox.proto):
//
//   offset 0   "GRADBOX1"           8 bytes, magic
//          8   frame version        u32 little-endian (kFrameVersion)
//         12   header length        u32
//         16   XXH3-64 of header    u64
//         24   FileHeader protobuf  header length bytes
//              payload              FileHeader.payload_length bytes
//              trailer              in a signed run's files (FileHeader.mac_nonce set): the
//                                   writer's Ed25519 signature (64 bytes; Note [Member
//                                   signatures] in wire/member_keys.h), the MAC tag (16 bytes;
//                                   Note [Signed files] in wire/file_mac.h), then the XXH3-64 of
//                                   both (8 bytes). The checksum tells a trailer damaged in transit
//                                   (corrupt: fetched again) from a wrong one (never applied).
//                                   Version 2 files had the tag and checksum only.
//
// The whole file is verifiable from its own bytes: a reader knows when it has all of it
// (size == 24 + header + payload) and that it is intact (both checksums). Cloud folders show
// names before content, so "the file exists" means nothing; "verify_bytes says complete" does.
//
// This is the only torch-free place that includes the generated protobuf code's users'
// header; LibTorch ships its own protobuf headers, so nothing here may be included from a
// translation unit that includes <torch/torch.h>.
#include <array>
#include <cstdint>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <vector>

#include "gradbox.pb.h"
#include "wire/file_mac.h"

namespace gradbox::wire {

namespace fs = std::filesystem;

inline constexpr uint32_t kFrameVersion = 1;
inline constexpr uint32_t kWireVersion = 3;        // FileHeader.version we accept at most
inline constexpr uint32_t kUnsignedWireVersion = 1;  // what unsigned files say (builds before signing read them)
inline constexpr uint32_t kMacOnlyWireVersion = 2;   // signed before member signatures: framed, never trusted
inline constexpr uint32_t kSignedWireVersion = 3;    // signed files: older builds refuse them as unsupported
inline constexpr size_t kPreambleSize = 24;
inline constexpr size_t kMacOnlyTrailerSize = FileMac::kTagSize + 8;  // a version 2 file's tag and checksum
inline constexpr size_t kTrailerSize = 64 + FileMac::kTagSize + 8;   // signature, tag and their checksum
inline constexpr size_t kMaxHeaderSize = 1 << 20;  // a header is small; more is corruption
// No file gradbox writes comes near this (GPT-2-Large's fp32 gradient is 3 GB, a LLaMA-7B's
// 28 GB); a header that declares more is sound framing around an impossible claim.
inline constexpr uint64_t kMaxPayloadSize = uint64_t{1} << 40;

// What a reader can say about a file's bytes.
enum class FileState {
  complete,     // every byte present and both checksums match
  incomplete,   // shorter than its header says (or not even a header yet): still arriving
  corrupt,      // wrong magic, checksum mismatch, longer than declared: stale or damaged
  unsupported,  // a frame or wire version this build does not know (the frame version lies
                // outside both checksums, so a damaged copy can look like this too: retry first)
};
const char* file_state_name(FileState state);

struct Verification {
  FileState state = FileState::incomplete;
  std::string reason;       // empty when complete
  uint64_t expected_size = 0;  // known once the preamble and header are readable
  // Corrupt for what its intact header says (a payload over kMaxPayloadSize): no other copy of
  // these bytes can be better, so a reader gives up at once instead of retrying.
  bool hopeless = false;
};

// Rejected file: the message names the file and the reason.
class WireError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A file whose MAC tag is wrong or missing where one is required (a SignatureError), or an
// unsigned-run reader's file with a tag it cannot check: told apart from damage so that it can be
// counted as what it is, a file someone without the key wrote.
class SignatureError : public WireError {
 public:
  using WireError::WireError;
};

// What a file is tagged and checked with in a signed run: the run's MAC and the file's name,
// relative to the shared folder (Note [Signed files]). Without a MAC (an unsigned run) files are
// neither tagged nor checked.
struct FileKey {
  const FileMac* mac = nullptr;
  std::string_view rel;
};

// The member a header says wrote its file: a gradient's worker, a commit's owner, a
// heartbeat's, fingerprint's or run config's worker, a checkpoint's publisher. A signed file's
// signer must be this member.
std::string_view writer_of(const FileHeader& header);

struct WireFile {
  FileHeader header;
  std::string payload;
};

// A complete file's header and a view of its payload in the bytes it was parsed from.
struct WireView {
  FileHeader header;
  std::string_view payload;
};

// Serialises `header` (filling version, payload_length and payload_checksum) and the payload;
// with a key, also a fresh nonce and the tag.
std::string frame(FileHeader header, std::string_view payload, FileKey key = {});
// The same into out (its contents replaced, its buffer reused).
void frame_into(FileHeader header, std::string_view payload, std::string& out, FileKey key = {});

// A framed file as the pieces it is written from, so that a payload of hundreds of MB is never
// copied behind its header: the head (preamble and header) and the trailer are built here, the
// payload is the caller's (it must outlive this). header is the header as framed (version,
// lengths, checksum, nonce and member filled in).
struct FramedPieces {
  FileHeader header;
  std::string head;
  std::string_view payload;
  std::string trailer;
  std::array<std::string_view, 3> pieces() const { return {head, payload, trailer}; }
  uint64_t size() const { return head.size() + payload.size() + trailer.size(); }
};
FramedPieces frame_pieces(FileHeader header, std::string_view payload, FileKey key = {});

Verification verify_bytes(std::string_view bytes);
// Reads the preamble and header, then checksums the payload in pieces (a file is never held
// whole: the syncer verifies every download of a 50 MB shard with this).
Verification verify_file(const fs::path& path);

// What a file of file_size bytes that starts with `first` can be, judged without its payload:
// incomplete while it is shorter than its preamble, its header or its declared length; corrupt
// or unsupported where its preamble or header says so; complete when they are sound and the size
// is the declared one (the payload is not checked: verify_file does that). head_size(first) is
// how many bytes `first` should hold: the preamble, then preamble and header once the preamble
// is there (a cloud folder's copier reads that much first, and the payload only when it is all
// there).
Verification verify_head(std::string_view first, uint64_t file_size);
size_t head_size(std::string_view first);

// Parses a complete file; throws WireError naming `origin` for anything but FileState::complete.
// With a key, a file without a tag or with a wrong one, or not signed by the member its header
// names as its writer, throws SignatureError before anything reads its payload; without one, a
// signed file's tag and signature are not checked.
WireFile parse(std::string_view bytes, const std::string& origin, FileKey key = {});
// The same, taking the bytes over: the payload keeps their buffer.
WireFile parse(std::string&& bytes, const std::string& origin, FileKey key = {});
// The same checks; the payload stays where it is (valid while bytes are).
WireView parse_view(std::string_view bytes, const std::string& origin, FileKey key = {});
WireFile read_wire_file(const fs::path& path);

// Throws WireError naming `origin` when the file belongs to another run or another model.
void check_identity(const FileHeader& header, const std::string& run_id, uint64_t model_fingerprint,
                    const std::string& origin);

}  // namespace gradbox::wire
