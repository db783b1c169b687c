#pragma once
// A thin facade over spdlog. LibTorch ships its own fmt and protobuf headers, which clash with
// Debian's, so translation units that include <torch/torch.h> must not include spdlog: they log
// through this header with gradbox::str(...) messages.
#include <filesystem>
#include <memory>
#include <optional>
#include <string>

namespace gradbox::log {

enum class Level { debug, info, warn, error };

// Once, from main: level, and optionally a file that receives a copy of every line.
void setup(Level level, const std::optional<std::filesystem::path>& file = std::nullopt);
Level parse_level(const std::string& name);  // throws InputError naming --log-level

// One named logger per component ("trainer", "data", ...).
class Logger {
 public:
  explicit Logger(const std::string& name);
  void debug(const std::string& msg) const;
  void info(const std::string& msg) const;
  void warn(const std::string& msg) const;
  void error(const std::string& msg) const;

 private:
  std::shared_ptr<void> impl_;  // spdlog::logger, kept opaque on purpose
};

}  // namespace gradbox::log
