#pragma once
// Note [Member signatures]
// The run secret's MAC (Note [Signed files]) keeps strangers out, but every member holds the
// same secret, so one member could write under another's name. So every signed file also
// carries an Ed25519 signature by its writer, under a key that the run's owner certified for
// that writer's name:
//
//   owner key   = Ed25519 from HMAC-SHA256(run secret, "gradbox owner key 1")
//   member key  = Ed25519 from HMAC-SHA256(run secret, "gradbox member key 1" | name)
//   certificate = owner's signature of ("gradbox member certificate 1" | name | member public key)
//   signature   = member's signature of ("gradbox member signature 1" | run id | file name |
//                 digest of every byte of the file before the signature)
//   digest      = SHA-256 of ("gradbox pieces 1" | size | SHA-256 of each 4 MiB piece), the
//                 pieces hashed on every core: one SHA-256 stream runs at 1.8 GB/s with the CPU's
//                 SHA instructions and about a third of that without (most free-session CPUs)
//
// The header names the member and carries its public key and certificate (FileHeader.member*);
// a reader checks the certificate against the owner's public key, that the member is the
// writer the header names (a gradient's worker, a commit's owner, ...), then the signature.
//
// Who holds what:
//  - The run secret (`gradbox secret`) derives every key, so its holder can sign as anyone: the
//    owner, or a team whose members trust each other. Give it to nobody you do not trust.
//  - A member credential (`gradbox secret --member NAME`) holds the MAC's key, the owner's public
//    key, and that member's key and certificate, nothing more: its holder can write only as NAME,
//    and cannot make a certificate for any other name. Give each volunteer one of these instead.
// Both come in through --run-secret-file or $GRADBOX_RUN_SECRET; a credential says which it is by
// its first characters.
//
// Torch- and protobuf-free; OpenSSL's libcrypto behind it.
#include <array>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <span>
#include <string>
#include <string_view>

namespace gradbox::wire {

using Key32 = std::array<unsigned char, 32>;
using PublicKey = Key32;
using Signature = std::array<unsigned char, 64>;

// HMAC-SHA256(secret, the fields, each length-prefixed so that no two lists encode alike).
Key32 derive_key(std::string_view secret, std::initializer_list<std::string_view> fields);
Key32 sha256(std::string_view bytes);
// The digest a member signs (above); the same on any number of cores.
Key32 file_digest(std::string_view bytes);
// The same of the pieces' concatenation, without joining them (a framed file's head and payload).
Key32 file_digest(std::span<const std::string_view> pieces);
inline constexpr size_t kDigestPiece = size_t{4} << 20;

// An Ed25519 key pair from a 32-byte seed.
class SigningKey {
 public:
  explicit SigningKey(const Key32& seed);
  ~SigningKey();
  SigningKey(SigningKey&&) noexcept;
  SigningKey& operator=(SigningKey&&) noexcept;
  const PublicKey& public_key() const { return public_key_; }
  Signature sign(std::string_view message) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  PublicKey public_key_{};
};

bool signature_valid(const PublicKey& key, std::string_view message, std::string_view signature);

// What the owner signs: "this key is `member`'s".
std::string certificate_message(std::string_view member, std::string_view public_key);
// What a member signs: the file `rel` of run `run_id` whose bytes before the signature hash to `digest`.
std::string signature_message(std::string_view run_id, std::string_view rel, const Key32& digest);

// `gradbox secret --member NAME`'s output, one line:
//   gradbox-member-1:<name>:<MAC key>:<member seed>:<owner public key>:<certificate>   (hex)
struct MemberCredential {
  static constexpr std::string_view kPrefix = "gradbox-member-1:";
  std::string member;
  Key32 mac_key{};
  Key32 seed{};
  PublicKey owner{};
  Signature certificate{};

  static bool looks_like(std::string_view text) { return text.starts_with(kPrefix); }
  // InputError naming `origin` and what is wrong.
  static MemberCredential parse(std::string_view text, const std::string& origin);
  std::string text() const;
};

}  // namespace gradbox::wire
