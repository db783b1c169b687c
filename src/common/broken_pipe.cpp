#include "common/broken_pipe.h"

#include <signal.h>

namespace gradbox {
namespace {

void on_broken_pipe(int) {}  // the write that raised it returns EPIPE, which its caller reports

}  // namespace

void survive_broken_pipes() {
  struct sigaction current {};
  if (::sigaction(SIGPIPE, nullptr, &current) != 0 || current.sa_handler != SIG_DFL) return;
  struct sigaction action {};
  action.sa_handler = on_broken_pipe;
  action.sa_flags = SA_RESTART;
  ::sigemptyset(&action.sa_mask);
  ::sigaction(SIGPIPE, &action, nullptr);
}

}  // namespace gradbox
