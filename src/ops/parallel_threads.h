// at::parallel_for sets a thread's OpenMP pool size on its first call, from the process-wide value LibTorch keeps
// (the last at::set_num_threads of any thread). The "first call" flag is a thread_local of an inline function,
// so each shared library that compiles parallel_for in has its own: libtorch and this library. A thread that
// wants its own count (compute_settings.h: set_thread_local_threads) runs both initialisations first.
#pragma once

namespace dflash::ops {

// This library's lazy thread-pool initialisation, on the calling thread (a no-op after the first call).
void init_parallel_threads_here();

}  // namespace dflash::ops
