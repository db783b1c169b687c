#include "wire/member_keys.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include <algorithm>
#include <thread>
#include <vector>

#include "common/error.h"

namespace gradbox::wire {
namespace {

void append_field(std::string& out, std::string_view field) {
  const uint64_t size = field.size();
  out.append(reinterpret_cast<const char*>(&size), sizeof(size));
  out.append(field);
}

template <size_t N>
std::string_view view(const std::array<unsigned char, N>& bytes) {
  return {reinterpret_cast<const char*>(bytes.data()), N};
}

constexpr char kHex[] = "0123456789abcdef";

template <size_t N>
std::string hex(const std::array<unsigned char, N>& bytes) {
  std::string out;
  for (unsigned char b : bytes) out += {kHex[b >> 4], kHex[b & 15]};
  return out;
}

template <size_t N>
bool from_hex(std::string_view text, std::array<unsigned char, N>& out) {
  if (text.size() != 2 * N) return false;
  const auto digit = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  };
  for (size_t i = 0; i < N; ++i) {
    const int hi = digit(text[2 * i]), lo = digit(text[2 * i + 1]);
    if (hi < 0 || lo < 0) return false;
    out[i] = static_cast<unsigned char>(hi * 16 + lo);
  }
  return true;
}

}  // namespace

Key32 derive_key(std::string_view secret, std::initializer_list<std::string_view> fields) {
  std::string message;
  for (std::string_view field : fields) append_field(message, field);
  Key32 out{};
  unsigned int size = 0;
  GB_CHECK(HMAC(EVP_sha256(), secret.data(), static_cast<int>(secret.size()),
                reinterpret_cast<const unsigned char*>(message.data()), message.size(), out.data(), &size) != nullptr &&
               size == out.size(),
           "HMAC-SHA256 failed");
  return out;
}

Key32 sha256(std::string_view bytes) {
  Key32 out{};
  unsigned int size = 0;
  GB_CHECK(EVP_Digest(bytes.data(), bytes.size(), out.data(), &size, EVP_sha256(), nullptr) == 1 && size == out.size(),
           "SHA-256 failed");
  return out;
}

Key32 file_digest(std::string_view bytes) {
  const std::string_view pieces[] = {bytes};
  return file_digest(pieces);
}

namespace {

// SHA-256 of bytes [begin, end) of the pieces' concatenation.
Key32 sha256_of_range(std::span<const std::string_view> pieces, uint64_t begin, uint64_t end) {
  EVP_MD_CTX* ctx = EVP_MD_CTX_new();
  GB_CHECK(ctx != nullptr && EVP_DigestInit_ex(ctx, EVP_sha256(), nullptr) == 1, "SHA-256 failed");
  uint64_t at = 0;
  bool ok = true;
  for (std::string_view piece : pieces) {
    const uint64_t from = std::max(begin, at), to = std::min<uint64_t>(end, at + piece.size());
    if (from < to) ok = ok && EVP_DigestUpdate(ctx, piece.data() + (from - at), to - from) == 1;
    at += piece.size();
  }
  Key32 out{};
  unsigned int size = 0;
  ok = ok && EVP_DigestFinal_ex(ctx, out.data(), &size) == 1 && size == out.size();
  EVP_MD_CTX_free(ctx);
  GB_CHECK(ok, "SHA-256 failed");
  return out;
}

}  // namespace

Key32 file_digest(std::span<const std::string_view> pieces) {
  uint64_t total = 0;
  for (std::string_view piece : pieces) total += piece.size();
  const size_t count = std::max<size_t>(1, (total + kDigestPiece - 1) / kDigestPiece);
  std::vector<Key32> digests(count);
  const auto hash_from = [&](size_t first, size_t step) {
    for (size_t i = first; i < count; i += step)
      digests[i] = sha256_of_range(pieces, std::min<uint64_t>(total, i * kDigestPiece), std::min<uint64_t>(total, (i + 1) * kDigestPiece));
  };
  const size_t threads = std::min<size_t>(count, std::max(1u, std::thread::hardware_concurrency()));
  std::vector<std::thread> helpers;
  for (size_t t = 1; t < threads; ++t) helpers.emplace_back(hash_from, t, threads);
  hash_from(0, threads);
  for (std::thread& h : helpers) h.join();
  std::string list;
  list.reserve(32 * count + 64);
  append_field(list, "gradbox pieces 1");
  list.append(reinterpret_cast<const char*>(&total), sizeof(total));
  for (const Key32& d : digests) list.append(view(d));
  return sha256(list);
}

struct SigningKey::Impl {
  EVP_PKEY* key = nullptr;
  ~Impl() { EVP_PKEY_free(key); }
};

SigningKey::SigningKey(const Key32& seed) : impl_(std::make_unique<Impl>()) {
  impl_->key = EVP_PKEY_new_raw_private_key(EVP_PKEY_ED25519, nullptr, seed.data(), seed.size());
  GB_CHECK(impl_->key != nullptr, "OpenSSL has no Ed25519");
  size_t size = public_key_.size();
  GB_CHECK(EVP_PKEY_get_raw_public_key(impl_->key, public_key_.data(), &size) == 1 && size == public_key_.size(),
           "Ed25519 public key");
}

SigningKey::~SigningKey() = default;
SigningKey::SigningKey(SigningKey&&) noexcept = default;
SigningKey& SigningKey::operator=(SigningKey&&) noexcept = default;

Signature SigningKey::sign(std::string_view message) const {
  EVP_MD_CTX* ctx = EVP_MD_CTX_new();
  GB_CHECK(ctx != nullptr, "EVP_MD_CTX_new failed");
  Signature out{};
  size_t size = out.size();
  const bool ok = EVP_DigestSignInit(ctx, nullptr, nullptr, nullptr, impl_->key) == 1 &&
                  EVP_DigestSign(ctx, out.data(), &size, reinterpret_cast<const unsigned char*>(message.data()),
                                 message.size()) == 1 &&
                  size == out.size();
  EVP_MD_CTX_free(ctx);
  GB_CHECK(ok, "Ed25519 signing failed");
  return out;
}

bool signature_valid(const PublicKey& key, std::string_view message, std::string_view signature) {
  if (signature.size() != Signature{}.size()) return false;
  EVP_PKEY* pkey = EVP_PKEY_new_raw_public_key(EVP_PKEY_ED25519, nullptr, key.data(), key.size());
  if (pkey == nullptr) return false;
  EVP_MD_CTX* ctx = EVP_MD_CTX_new();
  const bool ok = ctx != nullptr && EVP_DigestVerifyInit(ctx, nullptr, nullptr, nullptr, pkey) == 1 &&
                  EVP_DigestVerify(ctx, reinterpret_cast<const unsigned char*>(signature.data()), signature.size(),
                                   reinterpret_cast<const unsigned char*>(message.data()), message.size()) == 1;
  EVP_MD_CTX_free(ctx);
  EVP_PKEY_free(pkey);
  return ok;
}

std::string certificate_message(std::string_view member, std::string_view public_key) {
  std::string out;
  for (std::string_view field : {std::string_view("gradbox member certificate 1"), member, public_key})
    append_field(out, field);
  return out;
}

std::string signature_message(std::string_view run_id, std::string_view rel, const Key32& digest) {
  std::string out;
  for (std::string_view field : {std::string_view("gradbox member signature 1"), run_id, rel, view(digest)})
    append_field(out, field);
  return out;
}

MemberCredential MemberCredential::parse(std::string_view text, const std::string& origin) {
  const auto bad = [&](const std::string& why) {
    return InputError(str(origin, ": not a member credential as `gradbox secret --member` writes it: ", why));
  };
  if (!looks_like(text)) throw bad(str("it does not start with ", kPrefix));
  std::vector<std::string_view> fields;
  std::string_view rest = text.substr(kPrefix.size());
  for (size_t colon; (colon = rest.find(':')) != std::string_view::npos; rest.remove_prefix(colon + 1))
    fields.push_back(rest.substr(0, colon));
  fields.push_back(rest);
  if (fields.size() != 5) throw bad(str(fields.size(), " fields after the prefix, not 5"));
  MemberCredential c;
  c.member = std::string(fields[0]);
  if (c.member.empty()) throw bad("no member name");
  if (!from_hex(fields[1], c.mac_key) || !from_hex(fields[2], c.seed) || !from_hex(fields[3], c.owner) ||
      !from_hex(fields[4], c.certificate))
    throw bad("a key of the wrong length or not in lower-case hex (cut short when copied?)");
  const SigningKey key(c.seed);
  if (!signature_valid(c.owner, certificate_message(c.member, view(key.public_key())), view(c.certificate)))
    throw bad(str("its certificate for ", c.member, " is not the owner's signature (damaged when copied?)"));
  return c;
}

std::string MemberCredential::text() const {
  return str(kPrefix, member, ":", hex(mac_key), ":", hex(seed), ":", hex(owner), ":", hex(certificate));
}

}  // namespace gradbox::wire
