#include "device_list.h"

#include <cstdio>
#include <stdexcept>

namespace dflash::util {
namespace {

const char* const kGrammar =
    " (replicas separated by ';', the stages of a replica by ',', e.g. cuda:0,cuda:1;cuda:2,cuda:3)";

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

// Only spaces are trimmed: a tab or newline is a control character, refused, never trimmed away.
std::string trimmed(const std::string& s) {
  const auto a = s.find_first_not_of(' '), b = s.find_last_not_of(' ');
  return a == std::string::npos ? "" : s.substr(a, b - a + 1);
}

bool is_control(unsigned char c) { return c < 0x20 || c == 0x7f; }

// One entry, already trimmed and free of control bytes. `in` is " in '<list>'" for the message.
DeviceName parse_entry(const std::string& name, const std::string& where, const std::string& in) {
  const auto colon = name.find(':');
  const std::string type = name.substr(0, colon), index = colon == std::string::npos ? "" : name.substr(colon + 1);
  const bool digits = colon == std::string::npos ||
                      (!index.empty() && index.find_first_not_of("0123456789") == std::string::npos);
  if ((type != "cpu" && type != "cuda") || !digits)
    throw std::invalid_argument(where + ": expected a device like cpu, cuda or cuda:1, got " + quoted_device_text(name) + in);
  long value = 0;  // saturates: any index past the limit is refused below, however long
  for (const char c : index) value = value > kMaxDeviceIndex ? value : value * 10 + (c - '0');
  if (type == "cpu") {
    if (value != 0)
      throw std::invalid_argument(where + ": " + quoted_device_text(name) + in +
                                  ": the CPU is one device (cpu or cpu:0); list cpu again for another worker or replica");
    return {};
  }
  if (value > kMaxDeviceIndex)
    throw std::invalid_argument(where + ": " + quoted_device_text(name) + in + ": a CUDA device index is at most " +
                                std::to_string(kMaxDeviceIndex) +
                                " (the index type is 8 bits: a larger one would wrap onto another device)");
  return {true, int(value)};
}

void refuse_control_bytes(const std::string& spec, const std::string& where) {
  for (size_t i = 0; i < spec.size(); ++i) {
    if (!is_control(static_cast<unsigned char>(spec[i]))) continue;
    size_t a = spec.find_last_of(",;", i), b = spec.find_first_of(",;", i);
    a = a == std::string::npos ? 0 : a + 1;
    const std::string entry = spec.substr(a, b == std::string::npos ? std::string::npos : b - a);
    throw std::invalid_argument(where + ": a control character (byte " +
                                std::to_string(int(static_cast<unsigned char>(spec[i]))) + ") at position " +
                                std::to_string(i) + " of " + quoted_device_text(spec) + ", in entry " +
                                quoted_device_text(entry));
  }
}

}  // namespace

std::string quoted_device_text(const std::string& s) {
  std::string out = "'";
  for (const char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    if (is_control(c) || c >= 0x80) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", unsigned(c));
      out += buf;
    } else {
      out += ch;
    }
  }
  return out + "'";
}

DeviceGrid parse_device_grid(const std::string& spec, const std::string& where) {
  refuse_control_bytes(spec, where);
  const std::string shown = quoted_device_text(spec), in = " in " + shown;
  if (trimmed(spec).empty())
    throw std::invalid_argument(where + ": needs at least one device, e.g. cpu or cuda:0; got " + shown);
  DeviceGrid grid;
  const std::vector<std::string> replicas = split(spec, ';');
  for (size_t r = 0; r < replicas.size(); ++r) {
    grid.replicas.emplace_back();
    if (trimmed(replicas[r]).empty())
      throw std::invalid_argument(where + ": an empty replica in " + shown + " (replica " + std::to_string(r) + ")" +
                                  kGrammar);
    const std::vector<std::string> stages = split(replicas[r], ',');
    for (size_t s = 0; s < stages.size(); ++s) {
      const std::string name = trimmed(stages[s]);
      if (name.empty())
        throw std::invalid_argument(where + ": an empty stage in " + shown + " (stage " + std::to_string(s) +
                                    " of replica " + std::to_string(r) + ")" + kGrammar);
      grid.replicas.back().push_back(parse_entry(name, where, name == trimmed(spec) ? "" : in));
    }
  }
  const size_t stages = grid.replicas.front().size();
  for (size_t r = 1; r < grid.replicas.size(); ++r)
    if (grid.replicas[r].size() != stages)
      throw std::invalid_argument(where + ": every replica needs the same number of pipeline stages; replica 0 has " +
                                  std::to_string(stages) + ", replica " + std::to_string(r) + " has " +
                                  std::to_string(grid.replicas[r].size()) + " in " + shown + kGrammar);
  for (size_t r = 0; r < grid.replicas.size(); ++r)
    for (size_t q = 0; q < r; ++q)
      for (const DeviceName& d : grid.replicas[r])
        for (const DeviceName& e : grid.replicas[q])
          if (d.cuda && d == e)
            throw std::invalid_argument(where + ": " + d.str() + " is in replica " + std::to_string(q) + " and replica " +
                                        std::to_string(r) + " of " + shown +
                                        "; a CUDA device belongs to one replica (only cpu may repeat)");
  return grid;
}

std::vector<DeviceName> parse_device_list(const std::string& spec, const std::string& where) {
  refuse_control_bytes(spec, where);
  const std::string shown = quoted_device_text(spec), in = " in " + shown;
  if (spec.find(';') != std::string::npos)
    throw std::invalid_argument(where + ": a ';' in " + shown +
                                ": this list has no replicas, one device per worker separated by ',' (e.g. cuda:0,cuda:1)");
  if (trimmed(spec).empty())
    throw std::invalid_argument(where + ": needs at least one device, e.g. cpu or cuda:0; got " + shown);
  std::vector<DeviceName> out;
  const std::vector<std::string> entries = split(spec, ',');
  for (size_t i = 0; i < entries.size(); ++i) {
    const std::string name = trimmed(entries[i]);
    if (name.empty())  // 'cuda:0,,cuda:1' or a trailing ',': a typo, not a device to skip
      throw std::invalid_argument(where + ": an empty entry in " + shown + " (entry " + std::to_string(i) + ")");
    out.push_back(parse_entry(name, where, name == trimmed(spec) ? "" : in));
  }
  return out;
}

DeviceName parse_one_device(const std::string& spec, const std::string& where) {
  refuse_control_bytes(spec, where);
  if (spec.find_first_of(",;") != std::string::npos)
    throw std::invalid_argument(where + ": expected one device (cpu, cuda or cuda:N), got " + quoted_device_text(spec));
  const std::string name = trimmed(spec);
  if (name.empty())
    throw std::invalid_argument(where + ": needs a device, e.g. cpu or cuda:0; got " + quoted_device_text(spec));
  return parse_entry(name, where, name == spec ? "" : " in " + quoted_device_text(spec));
}

DeviceListSetting read_device_list_setting(const std::string& text, const std::string& where) {
  return {text, parse_device_list(text, where)};
}

DeviceGridSetting read_device_grid_setting(const std::string& text, const std::string& where) {
  return {text, parse_device_grid(text, where)};
}

}  // namespace dflash::util
