#include "parallel_threads.h"

#include <ATen/Parallel.h>

namespace dflash::ops {

void init_parallel_threads_here() { at::internal::lazy_init_num_threads(); }

}  // namespace dflash::ops
