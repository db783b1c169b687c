#pragma once
// Runs the real `gradbox` binary as a child process, for tests of whole commands.
#include <sys/types.h>

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace gradbox::testing {

struct ProcessResult {
  int exit_code = -1;  // 128 + signal when killed
  std::string output;  // stdout and stderr together
};

// Runs `program args...` to completion (bounded by timeout_seconds: killed past it).
ProcessResult run_process(const std::vector<std::string>& argv, double timeout_seconds = 300);

// Starts a child whose output goes to `log_path`; returns its pid.
pid_t start_process(const std::vector<std::string>& argv, const std::filesystem::path& log_path);
// Waits for a child started with start_process; returns its exit code (128 + signal if killed).
int wait_process(pid_t pid);
// The same for at most `seconds`: nullopt while it still runs (a hang, for a test to report).
std::optional<int> wait_process_for(pid_t pid, double seconds);

}  // namespace gradbox::testing
