// dflash doctor, section 4: an all-reduce through c10d Gloo and NCCL, each rank a thread of this process joining
// a loopback group (doctor.h).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <future>
#include <stdexcept>

#include <ATen/ATen.h>

#include "distributed.h"
#include "doctor.h"
#include "selfcheck_tolerance.h"

namespace dflash::doctor {

using namespace dflash::train;  // doctor asks the trainer's own functions what a run would do
namespace {

// A TCP port on 127.0.0.1 that nothing listens on now (the kernel's pick for port 0).
int free_loopback_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) throw std::runtime_error(std::string("socket: ") + std::strerror(errno));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof addr;
  const bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0 &&
                  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0;
  const int err = errno;
  ::close(fd);
  if (!ok) throw std::runtime_error(std::string("no free loopback port: ") + std::strerror(err));
  return ntohs(addr.sin_port);
}

// Rank r of devices.size() ranks (on devices[r]) all-reduces 1024 values of r + 1; each must come back as the sum
// 1 + 2 + ... + world. Returns the row's detail; throws what the first failing rank threw, or a wrong sum.
std::string all_reduce_on_threads(const std::string& backend, const std::vector<at::Device>& devices) {
  const int world = int(devices.size());
  const int port = free_loopback_port();
  GroupTimeouts timeouts;
  timeouts.store = std::chrono::seconds(30);  // a rank that never comes fails the row instead of hanging the report
  timeouts.collective = std::chrono::seconds(60);
  std::vector<std::future<double>> ranks;
  for (int r = 0; r < world; ++r)
    ranks.push_back(std::async(std::launch::async, [&, r] {
      auto group = join_group(backend, r, world, "127.0.0.1", port, devices[size_t(r)], timeouts);
      at::Tensor t = at::full({1024}, double(r + 1), at::TensorOptions().dtype(at::kFloat).device(devices[size_t(r)]));
      group->allreduce_sum(t);
      const at::Tensor host = t.cpu();
      const double lo = host.min().item<double>(), hi = host.max().item<double>();
      if (lo != hi) throw std::runtime_error("rank " + std::to_string(r) + " got unequal sums");
      return lo;
    }));
  std::string error;
  std::vector<double> sums;
  for (auto& f : ranks) {  // every rank is waited for before anything is reported
    try {
      sums.push_back(f.get());
    } catch (const std::exception& e) {
      if (error.empty()) error = ops::exception_first_line(e);
    }
  }
  if (!error.empty()) throw std::runtime_error(error);
  const double want = double(world) * double(world + 1) / 2;
  for (size_t r = 0; r < sums.size(); ++r)
    if (sums[r] != want)
      throw std::runtime_error("rank " + std::to_string(r) + " got the sum " + std::to_string(sums[r]) + ", expected " +
                               std::to_string(want));
  std::string on;
  for (const auto& d : devices) (on += on.empty() ? "" : ",") += d.str();  // piecewise: GCC 12's -Wrestrict
  return std::to_string(world) + (world == 1 ? " rank" : " ranks") + " (" + on + ") via 127.0.0.1:" +
         std::to_string(port) + ": all-reduce sum " + std::to_string(int64_t(want)) + " on every rank";
}

}  // namespace

void check_collectives(const std::vector<at::Device>& devices, const RowSink& sink) {
  const std::vector<at::Device> cpus(2, at::Device(at::kCPU));
  sink(run_check("collective", "cpu", "gloo", [&](CheckRow& row) {
    if (!have_gloo()) {
      row.status = CheckStatus::Skip;
      row.detail = "this build has no c10d Gloo (Debian's libgloo-dev at configure time)";
      return;
    }
    row.detail = all_reduce_on_threads("gloo", cpus);
    row.data = {{"backend", "gloo"}, {"world", cpus.size()}};
  }));
  std::vector<at::Device> gpus;
  std::string names;
  for (const auto& d : devices)
    if (d.is_cuda() && std::find(gpus.begin(), gpus.end(), d) == gpus.end()) {
      gpus.push_back(d);
      names += (names.empty() ? "" : ",") + d.str();
    }
  sink(run_check("collective", names, "nccl", [&](CheckRow& row) {
    row.status = CheckStatus::Skip;
    if (!have_nccl()) {
      row.detail = "this build has no c10d NCCL (the CUDA torch wheel and nccl.h at configure time)";
    } else if (gpus.empty()) {
      row.detail = "no CUDA device among the devices checked";
    } else {
      row.status = CheckStatus::Pass;
      row.detail = all_reduce_on_threads("nccl", gpus);
      row.data = {{"backend", "nccl"}, {"world", gpus.size()}};
    }
  }));
}

}  // namespace dflash::doctor
