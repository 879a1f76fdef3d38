// The torchrun variables (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT), read from the
// environment in this one place: open_run reads them once and hands the values to the device slicing
// (run_context.h) and to the process group (distributed.h). Torch-free.
#pragma once
#include <cstdint>
#include <optional>
#include <string>

namespace dflash::train {

// Where this process joins its group: rank `rank` of `world` through the TCPStore at addr:port.
struct GroupAddress {
  int rank = 0, world = 1;
  std::string addr;
  int port = 0;
};

struct TorchrunEnv {
  int64_t local_rank = 0, local_world = 1;  // LOCAL_RANK, LOCAL_WORLD_SIZE (unset: 0 and 1)
  // As written ("" when unset): checked only when a group is joined, so a single process needs none of them.
  std::string world_size, rank, master_addr, master_port;

  // WORLD_SIZE unset or empty: a single process. `single_when_one`: WORLD_SIZE=1 is a single process too.
  bool single_process(bool single_when_one) const { return world_size.empty() || (single_when_one && world_size == "1"); }
  // The group to join; throws std::invalid_argument naming the missing or malformed variable
  // ("distributed: a process group needs RANK (set RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT as torchrun does)").
  GroupAddress group() const;
};

// Reads the variables; throws std::invalid_argument for a LOCAL_RANK or LOCAL_WORLD_SIZE that is not a
// non-negative integer ("environment: LOCAL_RANK must be a non-negative integer, got 'x'").
TorchrunEnv read_torchrun_env();

}  // namespace dflash::train
