// Gradient averaging across processes with c10d (PyTorch's distributed engine, from the LibTorch in the
// wheel): rendezvous from torchrun-style env vars RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT through a
// c10d::TCPStore on rank 0, and c10d::ProcessGroupGloo for the all-reduce. The trainer reduces its workers'
// gradients into one CPU buffer first, so one Gloo all-reduce per step serves CPU and GPU workers alike.
// (ProcessGroupNCCL is not wired: the all-reduce runs on the CPU master buffer.)
#pragma once
#include <memory>
#include <string>

#include <ATen/core/Tensor.h>

namespace dflash::train {

class Collective {
 public:
  virtual ~Collective() = default;
  virtual int rank() const = 0;
  virtual int world() const = 0;
  // In-place sum over all processes of a contiguous CPU tensor (same shape/dtype everywhere).
  virtual void allreduce_sum(at::Tensor& t) = 0;
  virtual std::string describe() const = 0;
};

// WORLD_SIZE unset or 1: a single-process collective (no-op). Otherwise joins the c10d group; throws with
// the missing variable's name, or when this build has no Gloo (then says how to get it).
std::unique_ptr<Collective> collective_from_env();

bool have_gloo();

}  // namespace dflash::train
