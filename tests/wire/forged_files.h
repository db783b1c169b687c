#pragma once
// What a member holding a credential can make by hand (Note [Member signatures]): a file framed
// as frame() frames it, but signed as `member` whatever its header says, with the MAC right
// (every credential carries the MAC's key). Shared by the wire and the protocol tests.
#include <string>
#include <string_view>

#include "common/checksum.h"
#include "wire/envelope.h"

namespace gradbox::wire {

inline std::string signed_as(const FileMac& mac, const std::string& member, FileHeader header,
                             const std::string& payload, std::string_view rel) {
  header.set_version(kSignedWireVersion);
  header.set_mac_nonce(FileMac::new_nonce());
  header.set_member(member);
  const FileMac::Seal seal = mac.seal(member);
  header.set_member_public_key(seal.public_key.data(), seal.public_key.size());
  header.set_member_certificate(seal.certificate.data(), seal.certificate.size());
  header.set_payload_length(payload.size());
  header.set_payload_checksum(checksum64(payload.data(), payload.size()));
  std::string h;
  header.SerializeToString(&h);
  std::string out = "GRADBOX1";
  auto put = [&](auto v) { out.append(reinterpret_cast<const char*>(&v), sizeof v); };
  put(kFrameVersion);
  put(static_cast<uint32_t>(h.size()));
  put(checksum64(h.data(), h.size()));
  out += h + payload;
  const Signature signature = mac.sign(member, header.run_id(), rel, file_digest(out));
  out.append(reinterpret_cast<const char*>(signature.data()), signature.size());
  const FileMac::Tag tag = mac.tag(header.run_id(), rel, header.mac_nonce(), out);
  out.append(reinterpret_cast<const char*>(tag.data()), tag.size());
  put(checksum64(out.data() + out.size() - kTrailerSize + 8, kTrailerSize - 8));
  return out;
}

}  // namespace gradbox::wire
