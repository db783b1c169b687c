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
// What it cannot do: members share the secret, so the MAC cannot tell one member from another.
// Every file is therefore also signed by its writer (Note [Member signatures] in
// wire/member_keys.h), and a member's contribution is checked before it is averaged (finite,
// and a norm in line with the round's others).
//
// The MAC's key is not the secret's text but derived from it (HMAC-SHA256(secret, "gradbox mac
// key 1")), so that a member credential can carry it without carrying the secret.
//
// Torch- and protobuf-free; OpenSSL's libcrypto behind it.
#include <array>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "wire/member_keys.h"

namespace gradbox::wire {

// The run's shared secret: at least kMinSize characters of any kind (a platform's secret store
// holds text), as `gradbox secret` writes it: 64 hex digits of 32 random bytes. Or a member
// credential (Note [Member signatures]), checked as it is read.
class RunSecret {
 public:
  static constexpr size_t kMinSize = 16;
  static constexpr const char* kEnvironmentVariable = "GRADBOX_RUN_SECRET";
  // Surrounding white space is dropped; InputError naming `origin` when too short or a damaged credential.
  static RunSecret from_text(std::string_view text, const std::string& origin);
  // From `file` when given (InputError naming it when unreadable), else from the environment
  // variable when set; nullopt: none, the run is unsigned.
  static std::optional<RunSecret> find(const std::optional<std::filesystem::path>& file);
  static RunSecret generate();
  const std::string& text() const { return text_; }
  const std::string& origin() const { return origin_; }
  bool is_member_credential() const { return MemberCredential::looks_like(text_); }

 private:
  RunSecret(std::string text, std::string origin) : text_(std::move(text)), origin_(std::move(origin)) {}
  std::string text_;
  std::string origin_;
};

// What a run's keys let this process do with files: tag them (the MAC), sign them as a member
// and check both on the files it reads.
class FileMac {
 public:
  static constexpr size_t kTagSize = 16;
  static constexpr size_t kNonceSize = 16;
  using Tag = std::array<unsigned char, kTagSize>;

  // From the run secret (signs as any member) or a member credential (as its member only).
  explicit FileMac(const RunSecret& secret);
  ~FileMac();
  FileMac(const FileMac&) = delete;
  FileMac& operator=(const FileMac&) = delete;

  static std::string new_nonce();  // kNonceSize random bytes

  // The tag of `signed_bytes` (the file before its tag) named `rel` in run `run_id`.
  Tag tag(std::string_view run_id, std::string_view rel, std::string_view nonce, std::string_view signed_bytes) const;
  // The same of the pieces' concatenation, without joining them.
  Tag tag(std::string_view run_id, std::string_view rel, std::string_view nonce,
          std::span<const std::string_view> signed_pieces) const;
  // Constant time.
  static bool equal(const Tag& a, std::string_view b);

  // A credential's member; empty when built from the run secret itself.
  const std::string& member() const { return member_; }
  // `gradbox secret --member`: the credential for `member`; InputError when this is a credential.
  std::string issue_credential(const std::string& member) const;

  // `member`'s public key and the owner's certificate of it. A credential has only its own:
  // asking it for another member's is a bug of the caller (std::logic_error).
  struct Seal {
    PublicKey public_key{};
    Signature certificate{};
  };
  Seal seal(const std::string& member) const;
  Signature sign(const std::string& member, std::string_view run_id, std::string_view rel, const Key32& digest) const;
  // Empty when `certificate` is the owner's for (member, public_key) and `signature` that key's
  // over (run_id, rel, digest); otherwise why not.
  std::string check(std::string_view member, std::string_view public_key, std::string_view certificate,
                    std::string_view run_id, std::string_view rel, const Key32& digest, std::string_view signature) const;

 private:
  struct MemberKey {
    SigningKey key;
    Seal seal;
  };
  const MemberKey& member_key(const std::string& member) const;

  std::string mac_key_;
  std::string member_;                     // a credential's
  std::string secret_;                     // the run secret's text; empty for a credential
  PublicKey owner_public_{};
  std::unique_ptr<SigningKey> owner_key_;  // the run secret's only
  mutable std::mutex mutex_;               // members_ fills as files are signed, from any thread
  mutable std::map<std::string, MemberKey, std::less<>> members_;
};

}  // namespace gradbox::wire
