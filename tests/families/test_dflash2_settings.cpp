// DFlash2's settings in a drafter config.json (z-lab's dflash_config keys): read, written back, and the errors
// (file, field, value) for a missing or out-of-range setting or one that does not fit the family.
#include <gtest/gtest.h>

#include <stdexcept>
#include <string>

#include "dflash2_settings.h"
#include "drafter_config.h"
#include "error_of.h"
#include "family_registry.h"
#include "tiny_drafter_config.h"

using namespace dflash::drafter;

namespace {

nlohmann::json tiny_dflash2_json() {
  nlohmann::json j = tiny_drafter_config_json();
  j["architectures"] = {"DFlash2DraftModel"};
  j["is_causal"] = false;
  auto& dc = j["dflash_config"];
  dc["conv_kernel_size"] = 3;
  dc["conv_group_size"] = 4;
  dc["selector_rank"] = 6;
  dc["selector_top_k"] = 5;
  return j;
}

std::string err(const nlohmann::json& j) {
  return error_of<std::invalid_argument>([&] { parse_drafter_config(j, "d.json"); });
}

}  // namespace

TEST(DFlash2Settings, DefaultsAreTheSources) {
  const DFlash2Settings s;
  EXPECT_EQ(s.conv_kernel_size, 2);
  EXPECT_EQ(s.conv_group_size, 16);
  EXPECT_EQ(s.selector_rank, 256);
  EXPECT_EQ(s.selector_top_k, 16);
  EXPECT_EQ(kDefaultSelectorLossWeight, 1.0);
  EXPECT_EQ(kDefaultSelectorCandidates, SelectorCandidates::Strict);
  for (auto m : {SelectorCandidates::Inject, SelectorCandidates::Strict})
    EXPECT_EQ(selector_candidates_from_text(selector_candidates_name(m)), m);
  EXPECT_FALSE(selector_candidates_from_text("Inject"));
}

TEST(DFlash2Settings, ArchitecturesSetTheFamilyAndTheSettingsRoundTrip) {
  const DrafterConfig c = parse_drafter_config(tiny_dflash2_json(), "d.json");
  EXPECT_EQ(c.family, dflash::drafter::family_named("dflash2", "test"));
  EXPECT_EQ(family_settings_as<DFlash2Settings>(c, "DFlash2"), (DFlash2Settings{3, 4, 6, 5}));
  const nlohmann::json out = drafter_config_to_json(c);
  EXPECT_EQ(out["architectures"], nlohmann::json({"DFlash2DraftModel"}));
  EXPECT_EQ(out["is_causal"], false);
  EXPECT_EQ(out["dflash_config"]["conv_kernel_size"], 3);
  EXPECT_EQ(out["dflash_config"]["selector_top_k"], 5);
  EXPECT_EQ(out["dflash_config"]["block_size"], 4);  // vLLM: serving block == trained block
  const DrafterConfig back = parse_drafter_config(out, "out.json");
  EXPECT_EQ(back.family, dflash::drafter::family_named("dflash2", "test"));
  EXPECT_TRUE(same_family_settings(back, c));
  // A DFlash config writes none of them.
  const nlohmann::json plain = drafter_config_to_json(parse_drafter_config(tiny_drafter_config_json(), "p.json"));
  EXPECT_FALSE(plain["dflash_config"].contains("selector_rank"));
  EXPECT_FALSE(plain.contains("is_causal"));
}

TEST(DFlash2Settings, ErrorsNameFileFieldAndValue) {
  nlohmann::json j = tiny_dflash2_json();
  j["dflash_config"].erase("selector_rank");
  EXPECT_EQ(err(j), "d.json: field 'dflash_config.selector_rank': expected an integer, got nothing (missing)");
  j = tiny_dflash2_json();
  j["dflash_config"]["conv_kernel_size"] = "2";
  EXPECT_EQ(err(j), "d.json: field 'dflash_config.conv_kernel_size': expected an integer, got \"2\"");
  j = tiny_dflash2_json();
  j["dflash_config"]["conv_kernel_size"] = 0;
  EXPECT_EQ(err(j), "d.json: field 'dflash_config.conv_kernel_size': expected an integer in [1, 64], got 0");
  j = tiny_dflash2_json();
  j["dflash_config"]["conv_group_size"] = 5;  // hidden 16
  EXPECT_EQ(err(j), "d.json: field 'dflash_config.conv_group_size': expected a divisor of hidden_size (16), got 5");
  j = tiny_dflash2_json();
  j["dflash_config"]["selector_top_k"] = 33;  // vocabulary 32
  EXPECT_EQ(err(j), "d.json: field 'dflash_config.selector_top_k': expected at most vocab_size (32), got 33");
  j = tiny_dflash2_json();
  j["dflash_config"]["selector_rank"] = 0;
  EXPECT_EQ(err(j), "d.json: field 'dflash_config.selector_rank': expected an integer in [1, 65536], got 0");
  j = tiny_dflash2_json();
  j["dflash_config"]["output_multiplier"] = 0.5;
  EXPECT_EQ(err(j), "d.json: field 'dflash_config.output_multiplier': expected 1.0 or absent (other values are not "
                    "supported yet), got 0.5");
  j["dflash_config"]["output_multiplier"] = 1;  // the neutral value is read
  EXPECT_EQ(err(j), "");
  j = tiny_dflash2_json();
  j["draft_vocab_size"] = 16;
  EXPECT_NE(err(j).find("d.json: field 'draft_vocab_size': expected absent with architectures [\"DFlash2DraftModel\"]"),
            std::string::npos)
      << err(j);
  // Another family's config that carries a DFlash2 setting is ambiguous.
  nlohmann::json d = tiny_drafter_config_json();
  d["dflash_config"]["selector_top_k"] = 8;
  EXPECT_EQ(err(d), "d.json: field 'dflash_config.selector_top_k': expected absent for architectures "
                    "[\"DFlashDraftModel\"] (a DFlash2 drafter says [\"DFlash2DraftModel\"]), got 8");
}
