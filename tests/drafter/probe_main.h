// The frame the test probes share (dspark_probe, dflash2_probe): `PROBE OP IN OUT key=value ...` runs the named op
// on the tensors of the safetensors file IN and writes what it returns to OUT; a bad argument or a failing op is
// "<probe>: error: ..." on stderr with exit 1, a short command line the usage with exit 2. Test tools only.
#pragma once
#include <cstdio>
#include <exception>
#include <functional>
#include <map>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <ATen/ATen.h>

#include "safetensors.h"

namespace probe {

using Named = std::vector<std::pair<std::string, at::Tensor>>;
using Params = std::map<std::string, std::string>;
using Op = std::function<Named(const dflash::io::SafetensorsFile&, const Params&)>;

// The value of key=value `k`, or `dflt` when it was not given.
inline std::string param(const Params& p, const std::string& k, const std::string& dflt) {
  const auto it = p.find(k);
  return it == p.end() ? dflt : it->second;
}

inline int run(const std::string& probe, int argc, char** argv, const std::vector<std::pair<std::string, Op>>& ops) {
  std::string names;
  for (const auto& [name, op] : ops) names += (names.empty() ? "" : "|") + name;
  if (argc < 4) {
    std::fprintf(stderr, "usage: %s %s IN OUT [key=value ...]\n", probe.c_str(), names.c_str());
    return 2;
  }
  try {
    Params p;
    for (int i = 4; i < argc; ++i) {
      const std::string kv = argv[i];
      const auto eq = kv.find('=');
      if (eq == std::string::npos) throw std::invalid_argument("expected key=value, got " + kv);
      p[kv.substr(0, eq)] = kv.substr(eq + 1);
    }
    const std::string name = argv[1];
    const auto in = dflash::io::SafetensorsFile::open(argv[2]);
    for (const auto& [op_name, op] : ops) {
      if (op_name != name) continue;
      Named out = op(in, p);
      for (auto& [n, t] : out) t = t.contiguous();
      dflash::io::save_safetensors(argv[3], out);
      return 0;
    }
    throw std::invalid_argument("op: expected " + names + ", got " + name);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: error: %s\n", probe.c_str(), e.what());
    return 1;
  }
}

}  // namespace probe
