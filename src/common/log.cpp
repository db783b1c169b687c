#include "common/log.h"

#include <spdlog/sinks/basic_file_sink.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <mutex>
#include <vector>

#include "common/error.h"

namespace gradbox::log {
namespace {

std::mutex g_mutex;
std::vector<spdlog::sink_ptr> g_sinks;
spdlog::level::level_enum g_level = spdlog::level::info;

spdlog::level::level_enum to_spdlog(Level level) {
  switch (level) {
    case Level::debug: return spdlog::level::debug;
    case Level::info: return spdlog::level::info;
    case Level::warn: return spdlog::level::warn;
    case Level::error: return spdlog::level::err;
  }
  return spdlog::level::info;
}

constexpr const char* kPattern = "%H:%M:%S.%e %^%L%$ [%n] %v";

void add_sink(spdlog::sink_ptr sink) {
  sink->set_pattern(kPattern);
  g_sinks.push_back(std::move(sink));
}

std::vector<spdlog::sink_ptr>& sinks_locked() {
  if (g_sinks.empty()) add_sink(std::make_shared<spdlog::sinks::stderr_color_sink_mt>());
  return g_sinks;
}

spdlog::logger* as_logger(const std::shared_ptr<void>& impl) {
  return static_cast<spdlog::logger*>(impl.get());
}

}  // namespace

void setup(Level level, const std::optional<std::filesystem::path>& file) {
  std::lock_guard lock(g_mutex);
  g_level = to_spdlog(level);
  g_sinks.clear();
  add_sink(std::make_shared<spdlog::sinks::stderr_color_sink_mt>());
  if (file) add_sink(std::make_shared<spdlog::sinks::basic_file_sink_mt>(file->string()));
  spdlog::apply_all([&](std::shared_ptr<spdlog::logger> l) {
    l->sinks() = g_sinks;
    l->set_level(g_level);
  });
}

Level parse_level(const std::string& name) {
  if (name == "debug") return Level::debug;
  if (name == "info") return Level::info;
  if (name == "warn") return Level::warn;
  if (name == "error") return Level::error;
  throw InputError(str("--log-level: unknown level '", name, "' (debug, info, warn, error)"));
}

Logger::Logger(const std::string& name) {
  std::lock_guard lock(g_mutex);
  std::shared_ptr<spdlog::logger> logger = spdlog::get(name);
  if (!logger) {
    auto& sinks = sinks_locked();
    logger = std::make_shared<spdlog::logger>(name, sinks.begin(), sinks.end());
    logger->set_level(g_level);
    spdlog::register_logger(logger);
  }
  impl_ = logger;
}

void Logger::debug(const std::string& msg) const { as_logger(impl_)->debug(msg); }
void Logger::info(const std::string& msg) const { as_logger(impl_)->info(msg); }
void Logger::warn(const std::string& msg) const { as_logger(impl_)->warn(msg); }
void Logger::error(const std::string& msg) const { as_logger(impl_)->error(msg); }

}  // namespace gradbox::log
