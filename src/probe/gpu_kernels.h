// The GPU probes' kernels and their launch wrappers: the only code of the
// probes that nvcc compiles (gpu_kernels.cu). The probes themselves are host
// code in .cpp files built by the C++ compiler with the project's warnings
// and sanitizers. Each wrapper enqueues one launch and returns at once; a
// launch error is left for cudaGetLastError, as a <<<>>> launch leaves it.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

namespace tokenscope::probe {

// An empty kernel, one thread, on the current context's default stream.
void launch_empty_kernel();

// One thread that spins until *flag becomes non-zero (the host writes it
// through mapped pinned memory; `flag` is the device pointer) or about
// `max_cycles` SM clock cycles have passed, so a lost release cannot hang.
void launch_spin_kernel(volatile int* flag, long long max_cycles, cudaStream_t stream);

// A decode-like, memory-bound kernel on `blocks` blocks of `threads`: every
// thread streams over its share of the `n` float4 of `data`, `passes` times,
// and folds them into a sum; `out` is written only in the practically
// impossible case that the sum is 1234.5 (it keeps the loads alive).
void launch_decode_kernel(const float4* data, std::size_t n, int passes, float* out, int blocks, int threads,
                          cudaStream_t stream);

}  // namespace tokenscope::probe
