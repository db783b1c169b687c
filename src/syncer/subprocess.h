#pragma once
// Runs a program (no shell) with its stdout and stderr captured, bounded by a timeout.
#include <string>
#include <vector>

namespace gradbox::syncer {

struct SubprocessResult {
  int exit_code = -1;  // 128 + signal when killed
  bool timed_out = false;
  std::string out;
  std::string err;
};

// Throws BackendError when the program cannot be started (e.g. not installed).
SubprocessResult run_subprocess(const std::vector<std::string>& argv, double timeout_seconds);

}  // namespace gradbox::syncer
