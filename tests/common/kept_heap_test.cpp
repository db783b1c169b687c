// Note [Freed memory is kept]: a block a step frees stays with the process for the next step.
// Each case runs in a forked child, since the allocator's settings are per process.
#include "common/kept_heap.h"

#include <gtest/gtest.h>
#include <malloc.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>

namespace gradbox {
namespace {

constexpr size_t kBlock = 24 << 20;  // a step's tensor: above glibc's default thresholds

// In a child: allocates, fills and frees the block; exits 0 when the process still holds its
// bytes for the next allocation (free heap memory, not unmapped or trimmed), 1 when not.
int freed_block_is_kept(bool keep) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    if (keep) keep_freed_heap_memory();
    char* block = static_cast<char*>(std::malloc(kBlock));
    if (!block) ::_exit(101);
    std::memset(block, 1, kBlock);
    std::free(block);
    ::_exit(::mallinfo2().fordblks >= kBlock ? 0 : 1);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  EXPECT_TRUE(WIFEXITED(status));
  return WEXITSTATUS(status);
}

TEST(KeptHeap, WithoutItAFreedStepSizedBlockGoesBackToTheKernel) {
  ::unsetenv("GLIBC_TUNABLES");
  EXPECT_EQ(freed_block_is_kept(false), 1);
}

TEST(KeptHeap, WithItTheFreedBlockStaysForTheNextStep) {
  ::unsetenv("GLIBC_TUNABLES");
  EXPECT_EQ(freed_block_is_kept(true), 0);
}

TEST(KeptHeap, AUsersOwnMallocSettingsAreLeftAlone) {
  ::setenv("MALLOC_TRIM_THRESHOLD_", "0", 1);  // glibc reads it at start-up only; here, only we do
  EXPECT_EQ(freed_block_is_kept(true), 1);
  ::unsetenv("MALLOC_TRIM_THRESHOLD_");
}

}  // namespace
}  // namespace gradbox
