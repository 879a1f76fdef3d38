#include "device_layout.h"

#include <stdexcept>

#include "compute_settings.h"

namespace dflash::models {
namespace {

// `s` cut at every `sep`, keeping empty pieces (an empty replica or stage is an error, not skipped).
std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  size_t start = 0;
  for (;;) {
    const size_t at = s.find(sep, start);
    out.push_back(s.substr(start, at == std::string::npos ? std::string::npos : at - start));
    if (at == std::string::npos) return out;
    start = at + 1;
  }
}

std::string trimmed(const std::string& s) {
  const auto a = s.find_first_not_of(" \t"), b = s.find_last_not_of(" \t");
  return a == std::string::npos ? "" : s.substr(a, b - a + 1);
}

}  // namespace

bool DeviceLayout::all_cpu() const {
  for (const auto& r : replicas)
    for (const auto& d : r)
      if (!d.is_cpu()) return false;
  return true;
}

std::string DeviceLayout::str() const {
  std::string out;
  for (size_t r = 0; r < replicas.size(); ++r) {
    if (r) out += ';';
    for (size_t s = 0; s < replicas[r].size(); ++s) {
      if (s) out += ',';
      out += replicas[r][s].str();
    }
  }
  return out;
}

namespace {

// parse_device_layout without the check that the devices exist; `names` gets each device as written.
DeviceLayout parse_spelling(const std::string& spec, const std::string& where,
                            std::vector<std::vector<std::string>>& names) {
  const std::string shown = "'" + spec + "'";
  const std::string grammar = " (replicas separated by ';', the stages of a replica by ',', e.g. cuda:0,cuda:1;cuda:2,cuda:3)";
  // A tab or newline is a control character here, not a separator: refused with its position, never trimmed away.
  for (size_t i = 0; i < spec.size(); ++i)
    if (static_cast<unsigned char>(spec[i]) < 0x20 || spec[i] == 0x7f)
      throw std::invalid_argument(where + ": a control character (byte " +
                                  std::to_string(int(static_cast<unsigned char>(spec[i]))) + ") at position " +
                                  std::to_string(i) + " of the device list");
  if (trimmed(spec).empty()) throw std::invalid_argument(where + ": needs at least one device, e.g. cpu or cuda:0");
  DeviceLayout layout;
  for (const std::string& replica : split(spec, ';')) {
    names.emplace_back();
    layout.replicas.emplace_back();
    for (const std::string& raw : split(replica, ',')) {
      const std::string name = trimmed(raw);
      if (name.empty())
        throw std::invalid_argument(where + ": an empty " + (trimmed(replica).empty() ? "replica" : "stage") + " in " +
                                    shown + grammar);
      layout.replicas.back().push_back(ops::parse_device_name(name, where));
      names.back().push_back(name);
    }
  }
  const size_t stages = layout.replicas.front().size();
  for (size_t r = 1; r < layout.replicas.size(); ++r)
    if (layout.replicas[r].size() != stages)
      throw std::invalid_argument(where + ": every replica needs the same number of pipeline stages; replica 0 has " +
                                  std::to_string(stages) + ", replica " + std::to_string(r) + " has " +
                                  std::to_string(layout.replicas[r].size()) + " in " + shown + grammar);
  for (size_t r = 0; r < layout.replicas.size(); ++r)
    for (size_t q = 0; q < r; ++q)
      for (const at::Device& d : layout.replicas[r])
        for (const at::Device& e : layout.replicas[q])
          if (d.is_cuda() && d == e)
            throw std::invalid_argument(where + ": " + d.str() + " is in replica " + std::to_string(q) + " and replica " +
                                        std::to_string(r) + " of " + shown +
                                        "; a CUDA device belongs to one replica (only cpu may repeat)");
  return layout;
}

}  // namespace

DeviceLayout parse_device_layout(const std::string& spec, const std::string& where) {
  std::vector<std::vector<std::string>> names;
  const DeviceLayout layout = parse_spelling(spec, where, names);
  for (size_t r = 0; r < layout.replicas.size(); ++r)
    for (size_t s = 0; s < layout.replicas[r].size(); ++s)
      ops::check_device_available(layout.replicas[r][s], names[r][s], where);
  return layout;
}

DeviceLayout parse_device_layout_spelling(const std::string& spec, const std::string& where) {
  std::vector<std::vector<std::string>> names;
  return parse_spelling(spec, where, names);
}

DeviceLayout cpu_layout(int64_t stages) {
  DeviceLayout l;
  l.replicas.assign(1, std::vector<at::Device>(size_t(stages), at::Device(at::kCPU)));
  return l;
}

}  // namespace dflash::models
