// Gradient averaging across processes with c10d (PyTorch's distributed engine, from the LibTorch in the
// wheel): rendezvous from torchrun-style env vars RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT through a
// c10d::TCPStore on rank 0, then one of two backends for the all-reduce:
// - ProcessGroupGloo (CPU workers): the trainer sums its workers' gradients into one CPU buffer.
// - ProcessGroupNCCL (CUDA workers; builds with the CUDA torch wheel and nccl.h): the trainer sums its
//   workers' gradients on the first drafter device and NCCL reduces them there, with no copy to the host.
// A tensor on another device than the backend's is copied over and back (e.g. Gloo with CUDA workers).
#pragma once
#include <chrono>
#include <memory>
#include <string>

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include "torchrun_env.h"

namespace dflash::train {

class Collective {
 public:
  virtual ~Collective() = default;
  virtual int rank() const = 0;
  virtual int world() const = 0;
  // In-place sum over all processes of a contiguous tensor (same shape/dtype everywhere), on any device.
  virtual void allreduce_sum(at::Tensor& t) = 0;
  virtual std::string describe() const = 0;
};

// "gloo" or "nccl" for the `dist_backend` setting ("auto": nccl when the gradients live on a CUDA device
// and this build has NCCL, else gloo). Throws for nccl with a CPU gradient device or without NCCL.
std::string resolve_backend(const std::string& setting, const at::Device& grad_device);

// `env`: the torchrun variables (torchrun_env.h, read once by open_run). WORLD_SIZE unset, or 1 with dist_backend auto: a single-process collective (no-op). Otherwise joins the
// c10d group (WORLD_SIZE=1 with an explicit backend joins a group of one: a smoke test of that backend).
// Throws with the missing variable's name, or when this build lacks the backend (then says how to get it).
std::unique_ptr<Collective> collective_from_env(const TorchrunEnv& env, const std::string& setting = "auto",
                                                const at::Device& grad_device = at::kCPU);

// How long joining a group (the TCPStore's rendezvous) and each collective may take before they fail.
struct GroupTimeouts {
  std::chrono::seconds store{120}, collective{300};
};

// Joins a `backend` ("gloo" or "nccl") group as `rank` of `world` through the TCPStore at addr:port (rank 0 serves
// it); NCCL reduces on `device`. Throws when this build lacks the backend. collective_from_env uses it with the
// torchrun variables; `dflash doctor` joins loopback groups of its own threads.
std::unique_ptr<Collective> join_group(const std::string& backend, int rank, int world, const std::string& addr,
                                       int port, const at::Device& device, const GroupTimeouts& timeouts = {});

bool have_gloo();
bool have_nccl();
// The NCCL library's version ("2.27.3"); "" without NCCL in this build.
std::string nccl_version();

}  // namespace dflash::train
