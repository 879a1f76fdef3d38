#include "distributed.h"

#include <csignal>
#include <stdexcept>

#include <ATen/ATen.h>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#ifdef DFLASH_HAVE_GLOO
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#endif
#ifdef DFLASH_HAVE_NCCL
#include <torch/csrc/distributed/c10d/NCCLUtils.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

namespace dflash::train {
namespace {

class Single : public Collective {
 public:
  int rank() const override { return 0; }
  int world() const override { return 1; }
  void allreduce_sum(at::Tensor&) override {}
  std::string describe() const override { return "single process"; }
};

[[maybe_unused]] c10::intrusive_ptr<c10d::TCPStore> make_store(int rank, int world, const std::string& addr, int port,
                                                                std::chrono::seconds timeout) {
  // A peer that dies closes its sockets; a write to one must fail with EPIPE (an exception naming the
  // failure, then "dflash: error: ...") rather than kill this process silently with SIGPIPE, which
  // killed rank 0 (exit -13) once in a clean-clone CI run of test_failure_in_one_rank_stops_the_other.
  std::signal(SIGPIPE, SIG_IGN);
  c10d::TCPStoreOptions o;
  o.port = uint16_t(port);
  o.isServer = rank == 0;
  o.numWorkers = world;
  o.waitWorkers = true;
  o.timeout = timeout;
  return c10::make_intrusive<c10d::TCPStore>(addr, o);
}

std::string where(int rank, int world, const std::string& addr, int port) {
  return "rank " + std::to_string(rank) + " of " + std::to_string(world) + " via " + addr + ":" + std::to_string(port);
}

// Runs `reduce` on `t` itself when it is on `dev`, else on a copy there that is copied back.
template <typename F>
void on_device(at::Tensor& t, const at::Device& dev, F reduce) {
  if (t.device() == dev && t.is_contiguous()) {
    reduce(t);
    return;
  }
  at::Tensor x = t.to(dev).contiguous();
  reduce(x);
  t.copy_(x);
}

#ifdef DFLASH_HAVE_GLOO
class Gloo : public Collective {
 public:
  Gloo(int rank, int world, const std::string& addr, int port, const GroupTimeouts& t) : rank_(rank), world_(world) {
    store_ = make_store(rank, world, addr, port, t.store);
    auto opts = c10d::ProcessGroupGloo::Options::create(t.collective);
    // Loopback runs bind Gloo to 127.0.0.1; otherwise Gloo picks the interface of this host's name.
    const bool loopback = addr == "127.0.0.1" || addr == "localhost";
    opts->devices.push_back(loopback ? c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1")
                                     : c10d::ProcessGroupGloo::createDefaultDevice());
    pg_ = c10::make_intrusive<c10d::ProcessGroupGloo>(store_, rank, world, opts);
    desc_ = "c10d Gloo, " + where(rank, world, addr, port);
  }
  int rank() const override { return rank_; }
  int world() const override { return world_; }
  void allreduce_sum(at::Tensor& t) override {
    on_device(t, at::kCPU, [&](at::Tensor& x) {
      std::vector<at::Tensor> v{x};
      pg_->allreduce(v)->wait();
    });
  }
  std::string describe() const override { return desc_; }

 private:
  int rank_, world_;
  std::string desc_;
  c10::intrusive_ptr<c10d::TCPStore> store_;
  c10::intrusive_ptr<c10d::ProcessGroupGloo> pg_;
};
#endif

#ifdef DFLASH_HAVE_NCCL
class Nccl : public Collective {
 public:
  Nccl(int rank, int world, const std::string& addr, int port, const at::Device& dev, const GroupTimeouts& t)
      : rank_(rank), world_(world), dev_(dev) {
    store_ = make_store(rank, world, addr, port, t.store);
    auto opts = c10d::ProcessGroupNCCL::Options::create();
    opts->timeout = t.collective;
    pg_ = c10::make_intrusive<c10d::ProcessGroupNCCL>(store_, rank, world, opts);
    desc_ = "c10d NCCL on " + dev.str() + ", " + where(rank, world, addr, port);
  }
  // An explicit shutdown: destroying a ProcessGroupNCCL without one makes it warn and abort its communicators.
  ~Nccl() override {
    try {
      pg_->shutdown();
    } catch (const std::exception&) {
    }
  }
  int rank() const override { return rank_; }
  int world() const override { return world_; }
  void allreduce_sum(at::Tensor& t) override {
    on_device(t, dev_, [&](at::Tensor& x) {
      std::vector<at::Tensor> v{x};
      // wait() orders the current stream after NCCL's; later kernels and copies on it see the sum.
      pg_->allreduce(v)->wait();
    });
  }
  std::string describe() const override { return desc_; }

 private:
  int rank_, world_;
  at::Device dev_;
  std::string desc_;
  c10::intrusive_ptr<c10d::TCPStore> store_;
  c10::intrusive_ptr<c10d::ProcessGroupNCCL> pg_;
};
#endif

}  // namespace

bool have_gloo() {
#ifdef DFLASH_HAVE_GLOO
  return true;
#else
  return false;
#endif
}

bool have_nccl() {
#ifdef DFLASH_HAVE_NCCL
  return true;
#else
  return false;
#endif
}

std::string resolve_backend(const std::string& setting, const at::Device& grad_device) {
  const bool cuda = grad_device.is_cuda();
  if (setting == "auto") return cuda && have_nccl() ? "nccl" : "gloo";
  if (setting == "gloo") return "gloo";
  if (setting != "nccl")
    throw std::invalid_argument("train config: 'dist_backend' must be auto, gloo or nccl, got '" + setting + "'");
  if (!cuda)
    throw std::invalid_argument("train config: 'dist_backend' nccl needs every drafter device to be CUDA (cuda:N); "
                                "use gloo or auto for CPU workers");
  if (!have_nccl())
    throw std::invalid_argument("train config: 'dist_backend' nccl: this build has no c10d NCCL (it needs the CUDA "
                                "torch wheel and nccl.h at configure time); use gloo");
  return "nccl";
}

std::unique_ptr<Collective> collective_from_env(const TorchrunEnv& env, const std::string& setting,
                                                const at::Device& grad_device) {
  const std::string backend = resolve_backend(setting, grad_device);
  if (env.single_process(setting == "auto")) return std::make_unique<Single>();
  const GroupAddress g = env.group();
  return join_group(backend, g.rank, g.world, g.addr, g.port, grad_device);
}

std::unique_ptr<Collective> join_group(const std::string& backend, int rank, int world, const std::string& addr,
                                       int port, const at::Device& device, const GroupTimeouts& timeouts) {
  if (backend == "nccl") {
#ifdef DFLASH_HAVE_NCCL
    return std::make_unique<Nccl>(rank, world, addr, port, device, timeouts);
#else
    throw std::invalid_argument("distributed: this build has no c10d NCCL (it needs the CUDA torch wheel and nccl.h "
                                "at configure time)");
#endif
  }
  if (backend == "gloo") {
#ifdef DFLASH_HAVE_GLOO
    return std::make_unique<Gloo>(rank, world, addr, port, timeouts);
#else
    throw std::invalid_argument(
        "distributed: this build has no Gloo (the torch wheel ships no gloo headers; install Debian's libgloo-dev "
        "and re-run cmake)");
#endif
  }
  throw std::logic_error("distributed: no backend for '" + backend + "'");
}

std::string nccl_version() {
#ifdef DFLASH_HAVE_NCCL
  return c10d::getNcclVersion();
#else
  return "";
#endif
}

}  // namespace dflash::train
