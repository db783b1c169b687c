#include "wire/file_mac.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include <algorithm>
#include <memory>
#include <cstdlib>
#include <stdexcept>

#include "common/atomic_file.h"
#include "common/error.h"

namespace gradbox::wire {
namespace {

constexpr std::string_view kContext = "gradbox file mac 1";

std::string_view trimmed(std::string_view text) {
  const auto space = [](char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; };
  while (!text.empty() && space(text.front())) text.remove_prefix(1);
  while (!text.empty() && space(text.back())) text.remove_suffix(1);
  return text;
}

void append_field(std::string& out, std::string_view field) {
  const uint64_t size = field.size();  // length-prefixed: no two field lists encode alike
  out.append(reinterpret_cast<const char*>(&size), sizeof(size));
  out.append(field);
}

#if OPENSSL_VERSION_NUMBER >= 0x30000000L
// EVP_MAC "POLY1305", fetched once.
EVP_MAC* poly1305() {
  static EVP_MAC* mac = [] {
    EVP_MAC* m = EVP_MAC_fetch(nullptr, "POLY1305", nullptr);
    GB_CHECK(m != nullptr, "OpenSSL has no POLY1305 MAC");
    return m;
  }();
  return mac;
}

// Poly1305 of the pieces under a one-time key (OpenSSL 3: EVP_MAC).
FileMac::Tag poly1305_tag(const unsigned char (&key)[32], std::span<const std::string_view> pieces) {
  EVP_MAC_CTX* ctx = EVP_MAC_CTX_new(poly1305());
  GB_CHECK(ctx != nullptr, "EVP_MAC_CTX_new failed");
  const std::unique_ptr<EVP_MAC_CTX, void (*)(EVP_MAC_CTX*)> owned(ctx, EVP_MAC_CTX_free);
  FileMac::Tag out{};
  size_t out_size = 0;
  bool ok = EVP_MAC_init(ctx, key, sizeof(key), nullptr) == 1;
  for (std::string_view piece : pieces)
    ok = ok && EVP_MAC_update(ctx, reinterpret_cast<const unsigned char*>(piece.data()), piece.size()) == 1;
  GB_CHECK(ok && EVP_MAC_final(ctx, out.data(), &out_size, out.size()) == 1 && out_size == out.size(), "Poly1305 failed");
  return out;
}
#else
// OpenSSL 1.1.1 (Debian 11, Ubuntu 20.04) has no EVP_MAC: the same MAC as a signing key.
FileMac::Tag poly1305_tag(const unsigned char (&key)[32], std::span<const std::string_view> pieces) {
  EVP_PKEY* pkey = EVP_PKEY_new_raw_private_key(EVP_PKEY_POLY1305, nullptr, key, sizeof(key));
  GB_CHECK(pkey != nullptr, "EVP_PKEY_new_raw_private_key(POLY1305) failed");
  const std::unique_ptr<EVP_PKEY, void (*)(EVP_PKEY*)> owned_key(pkey, EVP_PKEY_free);
  EVP_MD_CTX* ctx = EVP_MD_CTX_new();
  GB_CHECK(ctx != nullptr, "EVP_MD_CTX_new failed");
  const std::unique_ptr<EVP_MD_CTX, void (*)(EVP_MD_CTX*)> owned(ctx, EVP_MD_CTX_free);
  FileMac::Tag out{};
  size_t out_size = out.size();
  bool ok = EVP_DigestSignInit(ctx, nullptr, nullptr, nullptr, pkey) == 1;
  for (std::string_view piece : pieces) ok = ok && EVP_DigestSignUpdate(ctx, piece.data(), piece.size()) == 1;
  GB_CHECK(ok && EVP_DigestSignFinal(ctx, out.data(), &out_size) == 1 && out_size == out.size(), "Poly1305 failed");
  return out;
}
#endif

}  // namespace

RunSecret RunSecret::from_text(std::string_view text, const std::string& origin) {
  const std::string_view secret = trimmed(text);
  if (MemberCredential::looks_like(secret)) {
    MemberCredential::parse(secret, origin);  // damaged when copied: say so now, naming where from
  } else if (secret.size() < kMinSize) {
    throw InputError(str(origin, ": a run secret needs at least ", kMinSize, " characters, this one has ", secret.size(),
                         " (`gradbox secret` makes one)"));
  }
  return RunSecret(std::string(secret), origin);
}

std::optional<RunSecret> RunSecret::find(const std::optional<std::filesystem::path>& file) {
  if (file) return from_text(read_file(*file), file->string());
  if (const char* text = std::getenv(kEnvironmentVariable); text && *text) return from_text(text, kEnvironmentVariable);
  return std::nullopt;
}

RunSecret RunSecret::generate() {
  unsigned char bytes[32];
  GB_CHECK(RAND_bytes(bytes, sizeof(bytes)) == 1, "OpenSSL's random generator failed");
  static constexpr char kHex[] = "0123456789abcdef";
  std::string text;
  for (unsigned char b : bytes) {
    text += kHex[b >> 4];
    text += kHex[b & 15];
  }
  return RunSecret(std::move(text), "a new secret");
}

FileMac::FileMac(const RunSecret& secret) {
  const auto bytes = [](const Key32& k) { return std::string(reinterpret_cast<const char*>(k.data()), k.size()); };
  if (secret.is_member_credential()) {
    MemberCredential c = MemberCredential::parse(secret.text(), secret.origin());
    mac_key_ = bytes(c.mac_key);
    member_ = c.member;
    owner_public_ = c.owner;
    SigningKey key(c.seed);
    Seal seal{key.public_key(), c.certificate};
    members_.emplace(c.member, MemberKey{std::move(key), seal});
    OPENSSL_cleanse(c.seed.data(), c.seed.size());
    return;
  }
  secret_ = secret.text();
  mac_key_ = bytes(derive_key(secret_, {"gradbox mac key 1"}));
  owner_key_ = std::make_unique<SigningKey>(derive_key(secret_, {"gradbox owner key 1"}));
  owner_public_ = owner_key_->public_key();
}

FileMac::~FileMac() {
  OPENSSL_cleanse(secret_.data(), secret_.size());
  OPENSSL_cleanse(mac_key_.data(), mac_key_.size());
}

const FileMac::MemberKey& FileMac::member_key(const std::string& member) const {
  std::lock_guard<std::mutex> lock(mutex_);
  if (auto it = members_.find(member); it != members_.end()) return it->second;
  if (!owner_key_)
    throw std::logic_error(str("the member credential for ", member_, " cannot sign as ", member));
  SigningKey key(derive_key(secret_, {"gradbox member key 1", member}));
  const PublicKey public_key = key.public_key();
  const Signature certificate = owner_key_->sign(certificate_message(
      member, std::string_view(reinterpret_cast<const char*>(public_key.data()), public_key.size())));
  return members_.emplace(member, MemberKey{std::move(key), Seal{public_key, certificate}}).first->second;
}

FileMac::Seal FileMac::seal(const std::string& member) const { return member_key(member).seal; }

Signature FileMac::sign(const std::string& member, std::string_view run_id, std::string_view rel,
                        const Key32& digest) const {
  return member_key(member).key.sign(signature_message(run_id, rel, digest));
}

std::string FileMac::check(std::string_view member, std::string_view public_key, std::string_view certificate,
                           std::string_view run_id, std::string_view rel, const Key32& digest,
                           std::string_view signature) const {
  if (public_key.size() != PublicKey{}.size()) return "no member key";
  if (!signature_valid(owner_public_, certificate_message(member, public_key), certificate))
    return str("the key it carries for ", member, " is not certified by this run's owner");
  PublicKey key{};
  std::copy(public_key.begin(), public_key.end(), reinterpret_cast<char*>(key.data()));
  if (!signature_valid(key, signature_message(run_id, rel, digest), signature))
    return str(member, "'s signature does not match: altered, or moved from another name");
  return "";
}

std::string FileMac::issue_credential(const std::string& member) const {
  if (!owner_key_)
    throw InputError(str("a member credential (for ", member_, ") cannot make credentials; the run secret can"));
  MemberCredential c;
  c.member = member;
  std::copy(mac_key_.begin(), mac_key_.end(), reinterpret_cast<char*>(c.mac_key.data()));
  c.seed = derive_key(secret_, {"gradbox member key 1", member});
  c.owner = owner_public_;
  c.certificate = seal(member).certificate;
  std::string text = c.text();
  OPENSSL_cleanse(c.seed.data(), c.seed.size());
  return text;
}

std::string FileMac::new_nonce() {
  std::string nonce(kNonceSize, '\0');
  GB_CHECK(RAND_bytes(reinterpret_cast<unsigned char*>(nonce.data()), static_cast<int>(nonce.size())) == 1,
           "OpenSSL's random generator failed");
  return nonce;
}

FileMac::Tag FileMac::tag(std::string_view run_id, std::string_view rel, std::string_view nonce,
                          std::string_view signed_bytes) const {
  const std::string_view pieces[] = {signed_bytes};
  return tag(run_id, rel, nonce, pieces);
}

FileMac::Tag FileMac::tag(std::string_view run_id, std::string_view rel, std::string_view nonce,
                          std::span<const std::string_view> signed_pieces) const {
  std::string context;
  for (std::string_view field : {kContext, run_id, rel, nonce}) append_field(context, field);
  unsigned char key[32];
  unsigned int key_size = 0;
  GB_CHECK(HMAC(EVP_sha256(), mac_key_.data(), static_cast<int>(mac_key_.size()),
                reinterpret_cast<const unsigned char*>(context.data()), context.size(), key, &key_size) != nullptr &&
               key_size == sizeof(key),
           "HMAC-SHA256 failed");
  struct Cleanse {
    unsigned char* key;
    ~Cleanse() { OPENSSL_cleanse(key, 32); }
  } cleanse_at_exit{key};
  return poly1305_tag(key, signed_pieces);
}

bool FileMac::equal(const Tag& a, std::string_view b) {
  return b.size() == a.size() && CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

}  // namespace gradbox::wire
