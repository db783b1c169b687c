#pragma once
// A child process that lives exactly as long as its worker: the syncer. Stopping it sends
// SIGTERM (the syncer then uploads what is left in the outbox) and waits a bounded time.
// Torch-free.
#include <sys/types.h>

#include <filesystem>
#include <string>
#include <vector>

namespace gradbox::worker {

class Sidecar {
 public:
  // Starts `argv` (argv[0] is a path) with stdout and stderr appended to `log_path`.
  Sidecar(std::vector<std::string> argv, const std::filesystem::path& log_path);
  ~Sidecar();
  Sidecar(const Sidecar&) = delete;
  Sidecar& operator=(const Sidecar&) = delete;

  pid_t pid() const { return pid_; }
  bool running();  // false once it has exited (reaped)
  int exit_status() const { return status_; }  // once running() is false: 128 + signal if killed
  // SIGTERM, then SIGKILL after `grace_seconds`; returns the exit status (128 + signal if killed).
  int stop(double grace_seconds = 30);

 private:
  pid_t pid_ = -1;
  int status_ = -1;
};

// An executable installed next to the running one (gradbox-sync beside gradbox).
std::filesystem::path sibling_executable(const std::string& name);

}  // namespace gradbox::worker
