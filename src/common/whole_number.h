#pragma once
// Flag text to a whole number: all of the text, or nothing (std::stoll alone stops at the first
// character that is not a digit, and throws on none).
#include <cstdint>
#include <exception>
#include <optional>
#include <string>

namespace gradbox {

inline std::optional<int64_t> parse_whole_number(const std::string& text) {
  size_t used = 0;
  int64_t value = 0;
  try {
    value = std::stoll(text, &used);
  } catch (const std::exception&) {
    return std::nullopt;
  }
  if (used != text.size()) return std::nullopt;
  return value;
}

}  // namespace gradbox
