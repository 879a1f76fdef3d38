// rejection_probe: src/eval/rejection_rule on inputs from a JSON file, for tests/python/test_eval_rejection_rule.py
// (a test tool). Input: a JSON array of cases {"target_probs": [[..]] (n+1 rows), "draft_probs": [[..]] (n rows), "draft_tokens": [..],
// "uniforms": [..], "extra_uniform": u}; output on stdout, per case, {"accepted", "token", "acceptance": [per draft],
// "residual": [[..] per draft]}, doubles printed so that they read back exactly.
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>

#include "rejection_rule.h"

int main(int argc, char** argv) {
  using namespace dflash::eval;
  if (argc != 2) {
    std::fprintf(stderr, "usage: rejection_probe INPUT.json\n");
    return 2;
  }
  try {
    std::ifstream f(argv[1]);
    nlohmann::json all = nlohmann::json::array();
    for (const auto& in : nlohmann::json::parse(f)) {
    const auto p = in.at("target_probs").get<std::vector<std::vector<double>>>();
    const auto q = in.at("draft_probs").get<std::vector<std::vector<double>>>();
    const auto tokens = in.at("draft_tokens").get<std::vector<int64_t>>();
    const auto u = in.at("uniforms").get<std::vector<double>>();
    const BlockVerdict v = verify_block(p, q, tokens, u, in.at("extra_uniform").get<double>());
    nlohmann::json out = {{"accepted", v.accepted}, {"token", v.token}, {"acceptance", nlohmann::json::array()},
                          {"residual", nlohmann::json::array()}};
    for (size_t j = 0; j < tokens.size(); ++j) {
      out["acceptance"].push_back(acceptance_probability(p[j], q[j], tokens[j]));
      out["residual"].push_back(residual_distribution(p[j], q[j]));
    }
    all.push_back(out);
    }
    std::printf("%s\n", all.dump().c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rejection_probe: %s\n", e.what());
    return 1;
  }
  return 0;
}
