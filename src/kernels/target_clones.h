#pragma once
// GB_KERNEL_CLONES before a hot loop's function: GCC builds it twice, for any x86-64 and for
// x86-64-v3 (AVX2, FMA), and picks one when the program loads. A file that uses it is built with
// -ffp-contract=off where its clones must compute the same bits. GCC 10 (Debian 11) does not
// know the x86-64-v3 level yet; Haswell is the CPU that defined it.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 11
#define GB_KERNEL_CLONES __attribute__((target_clones("default", "arch=x86-64-v3")))
#elif defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define GB_KERNEL_CLONES __attribute__((target_clones("default", "arch=haswell")))
#else
#define GB_KERNEL_CLONES
#endif
