#pragma once
// Note [Freed memory is kept]
// LibTorch's CPU tensors come from malloc, and glibc, left to its defaults, hands a training
// step fresh pages every step: a block above its mmap threshold is mapped and unmapped each
// time, and the heap's top is trimmed back to the kernel as soon as the step's tensors are
// freed (perf and strace here: ~25 brk calls a step, and page faults and the kernel zeroing
// pages took ~7% of a GPT-2 124M step and more at a 50k-vocabulary tiny model, whose step
// ran 1.4x faster without them). Python's PyTorch pays the same; nothing needs it.
// So gradbox fixes both thresholds: blocks up to 32 MB (glibc's most) come from the heap, and
// up to 256 MB of freed heap stays for the next step. The cost is resident memory that a
// step freed and the next one takes again (~115 MB more peak RSS at the tiny model).
// A user's own GLIBC_TUNABLES or MALLOC_*_ settings win: then nothing is changed.
namespace gradbox {

// Idempotent; call early in main().
void keep_freed_heap_memory();

}  // namespace gradbox
