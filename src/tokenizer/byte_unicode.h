#pragma once
// GPT-2's reversible byte <-> printable-character alphabet (bytes_to_unicode() in OpenAI's
// encoder.py). encoder.json and vocab.bpe spell tokens in it, so that no token contains
// whitespace or control characters; gradbox works on the raw bytes and converts at load time.
#include <array>
#include <optional>
#include <string>
#include <string_view>

namespace gradbox::tokenizer {

// Code point that stands for each byte: printable Latin-1 bytes stand for themselves, the
// other 68 bytes map to U+0100.. in byte order.
const std::array<char32_t, 256>& byte_to_code_point();

// "Ġworld" -> " world". nullopt if token is not UTF-8 or uses a character outside the alphabet.
std::optional<std::string> byte_level_to_bytes(std::string_view token);

// " world" -> "Ġworld" (UTF-8).
std::string bytes_to_byte_level(std::string_view bytes);

}  // namespace gradbox::tokenizer
