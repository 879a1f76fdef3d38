// The environment switches the ops and kernels read (DFLASH_FAULT_INJECT, DFLASH_CUDA_SMEM_LIMIT, DFLASH_CPU_ISA),
// checked when a command starts: an op reads them only at its first fused call (or its first CUDA launch), so a
// malformed value used to be taken by `dflash train` as a failing fused kernel and fall back, or be dropped on a
// machine without CUDA.
// Torch-free.
#pragma once
namespace dflash::ops {

// Throws std::invalid_argument naming the variable, its value and what it takes, for the first switch set to a
// value it does not take; nothing when every one is unset or well-formed.
void check_environment_switches();

}  // namespace dflash::ops
