#include "torchrun_env.h"

#include <cstdlib>
#include <stdexcept>

namespace dflash::train {
namespace {

std::string env_text(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

// A LOCAL_* variable as a non-negative integer; `def` when unset.
int64_t local_int(const char* name, int64_t def) {
  const std::string v = env_text(name);
  if (v.empty()) return def;
  char* end = nullptr;
  const long long x = std::strtoll(v.c_str(), &end, 10);
  if (*end != '\0' || x < 0 || x > 1 << 20)
    throw std::invalid_argument(std::string("environment: ") + name + " must be a non-negative integer, got '" + v + "'");
  return x;
}

const std::string& required(const char* name, const std::string& v) {
  if (v.empty())
    throw std::invalid_argument(std::string("distributed: a process group needs ") + name +
                                " (set RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT as torchrun does)");
  return v;
}

// `v`, the value of the variable `name`, as an integer.
int int_value(const char* name, const std::string& v) {
  try {
    size_t used = 0;
    const int x = std::stoi(v, &used);
    if (used == v.size()) return x;
  } catch (const std::exception&) {
  }
  throw std::invalid_argument(std::string("distributed: ") + name + " must be an integer, got '" + v + "'");
}

}  // namespace

GroupAddress TorchrunEnv::group() const {
  GroupAddress g;
  g.world = int_value("WORLD_SIZE", world_size);
  g.rank = int_value("RANK", required("RANK", rank));
  if (g.world < 1 || g.rank < 0 || g.rank >= g.world)
    throw std::invalid_argument("distributed: need 0 <= RANK < WORLD_SIZE, got RANK=" + std::to_string(g.rank) +
                                " WORLD_SIZE=" + std::to_string(g.world));
  g.addr = required("MASTER_ADDR", master_addr);
  g.port = int_value("MASTER_PORT", required("MASTER_PORT", master_port));
  return g;
}

TorchrunEnv read_torchrun_env() {
  TorchrunEnv e;
  e.local_world = local_int("LOCAL_WORLD_SIZE", 1);
  e.local_rank = local_int("LOCAL_RANK", 0);
  e.world_size = env_text("WORLD_SIZE");
  e.rank = env_text("RANK");
  e.master_addr = env_text("MASTER_ADDR");
  e.master_port = env_text("MASTER_PORT");
  return e;
}

}  // namespace dflash::train
