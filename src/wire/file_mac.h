#pragma once
// Note [Signed files]
// Anyone who can write to the shared folder can put a file in it, and the framing's checksums
// are no secret: a stranger could frame a gradient under a member's name and every replica
// would sum it. So a run secret, known to the members and never written into the folder, keys
// a MAC over every file:
//
//   key = HMAC-SHA256(secret, "gradbox file mac 1" | run id | file name | nonce)   one key per file
//   tag = Poly1305(key, every byte of the file before the tag)                     16 bytes, last
//
// The nonce is 16 random bytes in the header (FileHeader.mac_nonce), so no key ever tags two
// messages: Poly1305 is a one-time MAC, and at several GB/s the reason to use it (HMAC-SHA256
// over the payload runs at 0.5 GB/s on hosts without SHA instructions, the codec's own speed).
// The file name (relative to the shared folder) binds the file to its place: it names the round
// and the writer (exchange/folder_names.h), and readers check the header says the same. So a
// stranger cannot inject or alter a file, a genuine file replayed under another name (another
// round, another member) fails, and so does a file tagged with another run's secret.
//
// What it cannot do: members share the secret, so one member can still write under another's
// name. A member's contribution is therefore also checked before it is averaged (finite, and
// a norm in line with the round's others).
//
// Torch- and protobuf-free; OpenSSL's libcrypto behind it.
#include <array>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

namespace gradbox::wire {

// The run's shared secret: at least kMinSize characters of any kind (a platform's secret store
// holds text), as `gradbox secret` writes it: 64 hex digits of 32 random bytes.
class RunSecret {
 public:
  static constexpr size_t kMinSize = 16;
  static constexpr const char* kEnvironmentVariable = "GRADBOX_RUN_SECRET";
  // Surrounding white space is dropped; InputError naming `origin` when too short.
  static RunSecret from_text(std::string_view text, const std::string& origin);
  // From `file` when given (InputError naming it when unreadable), else from the environment
  // variable when set; nullopt: none, the run is unsigned.
  static std::optional<RunSecret> find(const std::optional<std::filesystem::path>& file);
  static RunSecret generate();
  const std::string& text() const { return text_; }

 private:
  explicit RunSecret(std::string text) : text_(std::move(text)) {}
  std::string text_;
};

class FileMac {
 public:
  static constexpr size_t kTagSize = 16;
  static constexpr size_t kNonceSize = 16;
  using Tag = std::array<unsigned char, kTagSize>;

  explicit FileMac(const RunSecret& secret);
  ~FileMac();
  FileMac(const FileMac&) = delete;
  FileMac& operator=(const FileMac&) = delete;

  static std::string new_nonce();  // kNonceSize random bytes

  // The tag of `signed_bytes` (the file before its tag) named `rel` in run `run_id`.
  Tag tag(std::string_view run_id, std::string_view rel, std::string_view nonce, std::string_view signed_bytes) const;
  // Constant time.
  static bool equal(const Tag& a, std::string_view b);

 private:
  std::string secret_;
};

}  // namespace gradbox::wire
