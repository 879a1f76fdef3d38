#include "distributed.h"

#include <cstdlib>
#include <stdexcept>

#include <ATen/ATen.h>

#ifdef DFLASH_HAVE_GLOO
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
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

std::string env_or_throw(const char* name) {
  const char* v = std::getenv(name);
  if (!v || !*v)
    throw std::invalid_argument(std::string("distributed: WORLD_SIZE > 1 but ") + name +
                                " is not set (set RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT as torchrun does)");
  return v;
}

int env_int(const char* name) {
  const std::string v = env_or_throw(name);
  try {
    size_t used = 0;
    const int x = std::stoi(v, &used);
    if (used == v.size()) return x;
  } catch (const std::exception&) {
  }
  throw std::invalid_argument(std::string("distributed: ") + name + " must be an integer, got '" + v + "'");
}

#ifdef DFLASH_HAVE_GLOO
class Gloo : public Collective {
 public:
  Gloo(int rank, int world, const std::string& addr, int port) : rank_(rank), world_(world) {
    c10d::TCPStoreOptions o;
    o.port = uint16_t(port);
    o.isServer = rank == 0;
    o.numWorkers = world;
    o.waitWorkers = true;
    o.timeout = std::chrono::seconds(120);
    store_ = c10::make_intrusive<c10d::TCPStore>(addr, o);
    auto opts = c10d::ProcessGroupGloo::Options::create(std::chrono::seconds(300));
    // Loopback runs bind Gloo to 127.0.0.1; otherwise Gloo picks the interface of this host's name.
    const bool loopback = addr == "127.0.0.1" || addr == "localhost";
    opts->devices.push_back(loopback ? c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1")
                                     : c10d::ProcessGroupGloo::createDefaultDevice());
    pg_ = c10::make_intrusive<c10d::ProcessGroupGloo>(store_, rank, world, opts);
    desc_ = "c10d Gloo, rank " + std::to_string(rank) + " of " + std::to_string(world) + " via " + addr + ":" +
            std::to_string(port);
  }
  int rank() const override { return rank_; }
  int world() const override { return world_; }
  void allreduce_sum(at::Tensor& t) override {
    std::vector<at::Tensor> v{t};
    pg_->allreduce(v)->wait();
  }
  std::string describe() const override { return desc_; }

 private:
  int rank_, world_;
  std::string desc_;
  c10::intrusive_ptr<c10d::TCPStore> store_;
  c10::intrusive_ptr<c10d::ProcessGroupGloo> pg_;
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

std::unique_ptr<Collective> collective_from_env() {
  const char* ws = std::getenv("WORLD_SIZE");
  if (!ws || std::string(ws).empty() || std::string(ws) == "1") return std::make_unique<Single>();
  const int world = env_int("WORLD_SIZE"), rank = env_int("RANK");
  if (world < 1 || rank < 0 || rank >= world)
    throw std::invalid_argument("distributed: need 0 <= RANK < WORLD_SIZE, got RANK=" + std::to_string(rank) +
                                " WORLD_SIZE=" + std::to_string(world));
  const std::string addr = env_or_throw("MASTER_ADDR");
  const int port = env_int("MASTER_PORT");
#ifdef DFLASH_HAVE_GLOO
  return std::make_unique<Gloo>(rank, world, addr, port);
#else
  (void)addr;
  (void)port;
  throw std::invalid_argument(
      "distributed: this build has no Gloo (the torch wheel ships no gloo headers; install Debian's libgloo-dev "
      "and re-run cmake)");
#endif
}

}  // namespace dflash::train
