// The device grammar shared by every command (util/device_list.h): what parses, what it parses to, and that each
// refusal is one line naming the key, the whole list and the entry at fault.
#include <gtest/gtest.h>

#include <string>

#include "device_list.h"
#include "error_of.h"

using namespace dflash::util;

TEST(DeviceList, ParsesLayoutsListsAndOneDevice) {
  const DeviceGrid g = parse_device_grid(" cuda:0 , cuda:1 ; cuda:2,cuda:3", "k");
  ASSERT_EQ(g.replicas.size(), 2u);
  EXPECT_EQ(g.replicas[1][0], (DeviceName{true, 2}));
  EXPECT_EQ(g.str(), "cuda:0,cuda:1;cuda:2,cuda:3");
  EXPECT_EQ(parse_device_grid("cuda;cpu:0;cpu", "k").str(), "cuda:0;cpu;cpu");  // bare cuda is cuda:0; cpu may repeat
  EXPECT_EQ(parse_device_grid("cuda:007", "k").str(), "cuda:7");
  EXPECT_EQ(parse_device_grid("cuda:127", "k").str(), "cuda:127");
  EXPECT_EQ(parse_device_list("cuda:1,cuda:1, cpu", "k").size(), 3u);  // workers may share a device
  EXPECT_EQ(parse_one_device(" cuda:3 ", "k"), (DeviceName{true, 3}));
}

TEST(DeviceList, EveryRefusalNamesTheKeyTheListAndTheEntry) {
  const std::string key = "train config: 'target_devices'";
  auto grid = [&](const std::string& s) { return error_of<std::invalid_argument>([&] { parse_device_grid(s, key); }); };
  auto list = [&](const std::string& s) { return error_of<std::invalid_argument>([&] { parse_device_list(s, key); }); };
  const struct {
    std::string spec, want;
    bool is_list;
  } cases[] = {
      {"cuda:0,,cuda:1", "an empty stage in 'cuda:0,,cuda:1' (stage 1 of replica 0)", false},
      {"cpu;;cpu", "an empty replica in 'cpu;;cpu' (replica 1)", false},
      {"cpu,cpu;", "an empty replica in 'cpu,cpu;' (replica 1)", false},
      {"cpu,", "an empty stage in 'cpu,' (stage 1 of replica 0)", false},
      {"  ", "needs at least one device, e.g. cpu or cuda:0; got '  '", false},
      {"cpu;gpu:0", "expected a device like cpu, cuda or cuda:1, got 'gpu:0' in 'cpu;gpu:0'", false},
      {"gpu:0", "expected a device like cpu, cuda or cuda:1, got 'gpu:0'", false},
      {"cuda:x", "got 'cuda:x'", false},
      {"cuda:-1", "got 'cuda:-1'", false},
      {"cuda: 1", "got 'cuda: 1'", false},
      {"CUDA:0", "got 'CUDA:0'", false},
      {"cpu,cuda:256", "'cuda:256' in 'cpu,cuda:256': a CUDA device index is at most 127", false},
      {"cuda:99999999999999999999", "'cuda:99999999999999999999': a CUDA device index is at most 127", false},
      {"cpu:1", "'cpu:1': the CPU is one device", false},
      {"cpu,cpu;cpu", "replica 0 has 2, replica 1 has 1 in 'cpu,cpu;cpu'", false},
      {"cuda:1;cuda:1", "cuda:1 is in replica 0 and replica 1 of 'cuda:1;cuda:1'", false},
      {"cuda:0\t,cpu", "a control character (byte 9) at position 6 of 'cuda:0\\x09,cpu', in entry 'cuda:0\\x09'", false},
      {"cpu;cpu\n", "a control character (byte 10) at position 7 of 'cpu;cpu\\x0a', in entry 'cpu\\x0a'", false},
      {std::string("cpu\0", 4), "(byte 0) at position 3", false},
      {"cpu\x7f", "(byte 127)", false},
      {"cpu,,cpu", "an empty entry in 'cpu,,cpu' (entry 1)", true},
      {"cpu,", "an empty entry in 'cpu,' (entry 1)", true},
      {"cpu;cpu", "a ';' in 'cpu;cpu': this list has no replicas", true},
      {"cpu,gpu", "got 'gpu' in 'cpu,gpu'", true},
      {"cuda:1\x1b", "(byte 27)", true},
  };
  for (const auto& c : cases) {
    const std::string got = c.is_list ? list(c.spec) : grid(c.spec);
    EXPECT_EQ(got.rfind(key + ": ", 0), 0u) << c.spec << " -> " << got;
    EXPECT_NE(got.find(c.want), std::string::npos) << c.spec << " -> " << got;
    for (const char ch : got) EXPECT_FALSE(static_cast<unsigned char>(ch) < 0x20) << "a control byte in: " << got;
  }
  EXPECT_NE(error_of([] { parse_one_device("cpu,cpu", "eval: --drafter-device"); })
                .find("eval: --drafter-device: expected one device (cpu, cuda or cuda:N), got 'cpu,cpu'"),
            std::string::npos);
  EXPECT_NE(error_of([] { parse_one_device("", "k"); }).find("k: needs a device"), std::string::npos);
}

TEST(DeviceList, CanonicalSpellingRoundTrips) {
  for (const std::string spec : {"cpu", " cuda:3 ,cuda:01;cpu,cpu", "cuda;cuda:1;cuda:2", "cpu:0,cpu:0;cpu,cpu"}) {
    const DeviceGrid g = parse_device_grid(spec, "k");
    EXPECT_EQ(parse_device_grid(g.str(), "k").replicas, g.replicas) << spec;
    EXPECT_EQ(parse_device_grid(g.str(), "k").str(), g.str()) << spec;
  }
}
