// A write to a pipe whose reader is gone must come back as EPIPE, not end the process
// (Note [A broken pipe is an error, not a death]). Each case runs in a forked child, since
// signal dispositions are per process.
#include "common/broken_pipe.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>

namespace gradbox {
namespace {

// In a child: writes to a pipe with no reader; exits 0 when the write failed with EPIPE.
int write_to_a_closed_pipe(bool survive) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::signal(SIGPIPE, SIG_DFL);
    if (survive) survive_broken_pipes();
    int fds[2];
    if (::pipe(fds) != 0) ::_exit(3);
    ::close(fds[0]);
    const char byte = 'x';
    const bool epipe = ::write(fds[1], &byte, 1) == -1 && errno == EPIPE;
    ::_exit(epipe ? 0 : 4);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  return status;
}

TEST(BrokenPipe, WithoutItAWriteToAClosedPipeEndsTheProcessSilently) {
  const int status = write_to_a_closed_pipe(false);
  ASSERT_TRUE(WIFSIGNALED(status));
  EXPECT_EQ(WTERMSIG(status), SIGPIPE);
}

TEST(BrokenPipe, WithItTheWriteFailsWithEpipeAndTheProcessGoesOn) {
  const int status = write_to_a_closed_pipe(true);
  ASSERT_TRUE(WIFEXITED(status)) << "killed by signal " << WTERMSIG(status);
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

TEST(BrokenPipe, ProgramsStartedAfterwardsKeepTheDefault) {
  // A shell that finds SIGPIPE ignored at start cannot reset it; with a handler, exec resets it.
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::signal(SIGPIPE, SIG_DFL);
    survive_broken_pipes();
    ::execl("/bin/sh", "sh", "-c", "kill -PIPE $$; exit 9", static_cast<char*>(nullptr));
    ::_exit(5);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  ASSERT_TRUE(WIFSIGNALED(status)) << "exit status " << WEXITSTATUS(status);
  EXPECT_EQ(WTERMSIG(status), SIGPIPE);
}

TEST(BrokenPipe, ADispositionSomeoneChoseIsLeftAlone) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::signal(SIGPIPE, SIG_IGN);
    survive_broken_pipes();
    struct sigaction now {};
    ::sigaction(SIGPIPE, nullptr, &now);
    ::_exit(now.sa_handler == SIG_IGN ? 0 : 6);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

}  // namespace
}  // namespace gradbox
