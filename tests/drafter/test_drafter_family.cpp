// The family a drafter config.json names, as DrafterConfig holds it (a registered Family, family_ref.h) and the
// registry reads it (family_registry.h): the spellings, a command's flag against its config, a DSpark config in
// DeepSpec's flat layout read and written back, and the errors (file, field, value) for what does not fit the family.
#include <gtest/gtest.h>

#include <stdexcept>
#include <string>

#include "drafter_config.h"
#include "error_of.h"
#include "family_registry.h"
#include "markov_heads.h"
#include "tiny_drafter_config.h"

using namespace dflash::drafter;

namespace {

// The tiny drafter as DeepSpec writes a DSpark drafter: flat mask_token_id / target_layer_ids, no dflash_config.
nlohmann::json tiny_dspark_json() {
  nlohmann::json j = tiny_drafter_config_json();
  j["architectures"] = {"Qwen3DSparkModel"};
  j["mask_token_id"] = j["dflash_config"]["mask_token_id"];
  j["target_layer_ids"] = j["dflash_config"]["target_layer_ids"];
  j.erase("dflash_config");
  j["markov_rank"] = 8;
  j["markov_head_type"] = "gated";
  j["enable_confidence_head"] = true;
  j["confidence_head_with_markov"] = false;
  return j;
}

}  // namespace

TEST(DrafterFamily, SpellingsRoundTripAndOthersAreRefused) {
  for (const char* name : {"dflash", "dspark", "dflash2"}) {
    const Family* f = find_family(name);
    ASSERT_NE(f, nullptr) << name;
    EXPECT_STREQ(f->name(), name);
    EXPECT_EQ(find_family_of_architecture(f->architecture()), f);
    EXPECT_EQ(FamilyRef(*f), FamilyRef(family_named(name, "test")));
  }
  EXPECT_STREQ(find_family("dspark")->architecture(), "Qwen3DSparkModel");
  EXPECT_EQ(find_family("DSpark"), nullptr);
  EXPECT_EQ(find_family(""), nullptr);
  // vLLM's DSparkDraftModel is a DeepSeek-V4 class: not read as a family.
  EXPECT_EQ(find_family_of_architecture("DSparkDraftModel"), nullptr);
  // A DrafterConfig's family by default: the registry's first, dflash.
  EXPECT_STREQ(DrafterConfig{}.family.name(), "dflash");
  EXPECT_EQ(DrafterConfig{}.family, FamilyRef(*find_family("dflash")));
  EXPECT_NE(DrafterConfig{}.family, FamilyRef(*find_family("dspark")));
  for (MarkovHeadType t : {MarkovHeadType::Vanilla, MarkovHeadType::Gated, MarkovHeadType::Rnn})
    EXPECT_EQ(markov_head_type_from_text(markov_head_type_name(t)), t);
  EXPECT_FALSE(markov_head_type_from_text("lstm"));
}

TEST(DrafterFamily, CommandFlagAgreesWithTheConfigOrIsRefused) {
  const Family& dflash = *find_family("dflash");
  const Family& dspark = *find_family("dspark");
  EXPECT_EQ(family_for_command("eval", "", std::nullopt, ""), FamilyRef(dflash));
  EXPECT_EQ(family_for_command("eval", "", FamilyRef(dspark), "c.json"), FamilyRef(dspark));
  EXPECT_EQ(family_for_command("eval", "dspark", FamilyRef(dspark), "c.json"), FamilyRef(dspark));
  EXPECT_EQ(family_for_command("eval", "dspark", std::nullopt, ""), FamilyRef(dspark));
  EXPECT_EQ(error_of<std::invalid_argument>([&] { family_for_command("eval", "dspark", FamilyRef(dflash), "c.json"); }),
            "eval: --drafter-family dspark disagrees with c.json (dflash, by its architectures)");
  EXPECT_EQ(error_of<std::invalid_argument>([] { family_for_command("plan", "spark", std::nullopt, ""); }),
            "plan: --drafter-family must be dflash, dspark or dflash2, got 'spark'");
}

TEST(DrafterFamily, DSparkConfigReadsFlatKeysAndWritesThemBack) {
  const DrafterConfig c = parse_drafter_config(tiny_dspark_json(), "d.json");
  EXPECT_STREQ(c.family.name(), "dspark");
  EXPECT_EQ(c.mask_token_id, 31);
  EXPECT_EQ(c.target_layer_ids, (std::vector<int64_t>{1, 5}));
  // The family's own settings object, read here as its DSparkHeads part (family.h's family_settings_as).
  const DSparkHeads& heads = family_settings_as<DSparkHeads>(c, "DSpark");
  EXPECT_EQ(heads.markov_rank, 8);
  EXPECT_EQ(heads.markov_head_type, MarkovHeadType::Gated);
  EXPECT_TRUE(heads.enable_confidence_head);
  EXPECT_FALSE(heads.confidence_head_with_markov);
  const nlohmann::json out = drafter_config_to_json(c);
  EXPECT_EQ(out["architectures"], nlohmann::json({"Qwen3DSparkModel"}));
  EXPECT_EQ(out["markov_rank"], 8);
  EXPECT_EQ(out["markov_head_type"], "gated");
  EXPECT_EQ(out["mask_token_id"], 31);
  const DrafterConfig back = parse_drafter_config(out, "out.json");
  EXPECT_EQ(back.family, c.family);
  EXPECT_TRUE(same_family_settings(back, c));
  // A DFlash config stays DFlash and writes no DSpark keys.
  const DrafterConfig plain = parse_drafter_config(tiny_drafter_config_json(), "p.json");
  EXPECT_STREQ(plain.family.name(), "dflash");
  EXPECT_FALSE(drafter_config_to_json(plain).contains("markov_rank"));
}

TEST(DrafterFamily, DSparkConfigErrorsNameFileFieldAndValue) {
  auto err = [](const nlohmann::json& j) { return error_of<std::invalid_argument>([&] { parse_drafter_config(j, "d.json"); }); };
  nlohmann::json j = tiny_dspark_json();
  j.erase("markov_rank");
  EXPECT_EQ(err(j), "d.json: field 'markov_rank': expected an integer, got nothing (missing)");
  j = tiny_dspark_json();
  j["markov_head_type"] = "lstm";
  EXPECT_EQ(err(j), "d.json: field 'markov_head_type': expected vanilla, gated or rnn, got \"lstm\"");
  j = tiny_dspark_json();
  j["markov_rank"] = -1;
  EXPECT_NE(err(j).find("d.json: field 'markov_rank': expected an integer in [0, 65536]"), std::string::npos) << err(j);
  j = tiny_dspark_json();
  j["markov_rank"] = 0;  // gated needs a rank
  EXPECT_NE(err(j).find("d.json: field 'markov_head_type': expected vanilla when markov_rank is 0"), std::string::npos)
      << err(j);
  j["markov_head_type"] = "vanilla";  // rank 0 + vanilla: the DFlash baseline with next-token labels
  EXPECT_EQ(err(j), "");
  j = tiny_dspark_json();
  j["enable_confidence_head"] = "yes";
  EXPECT_EQ(err(j), "d.json: field 'enable_confidence_head': expected true or false, got \"yes\"");
  nlohmann::json d = tiny_drafter_config_json();  // a DFlash config that carries a DSpark key is ambiguous
  d["markov_rank"] = 8;
  EXPECT_NE(err(d).find("d.json: field 'markov_rank': expected absent for architectures [\"DFlashDraftModel\"]"),
            std::string::npos)
      << err(d);
  // Issue 49: a family that has no draft vocabulary refuses one where it is read (DSpark used to train the full
  // vocabulary while its saved config kept draft_vocab_size); a list naming two families was read as its first.
  j = tiny_dspark_json();
  j["draft_vocab_size"] = 8;
  EXPECT_EQ(err(j), std::string("d.json: field 'draft_vocab_size': expected absent with architectures "
                                "[\"Qwen3DSparkModel\"] (") + find_family("dspark")->draft_vocab_refusal() +
                        "), got 8");
  j = tiny_dspark_json();
  j["architectures"] = {"Qwen3DSparkModel", "DFlashDraftModel"};
  EXPECT_NE(err(j).find("d.json: field 'architectures': expected [\"DFlashDraftModel\"], [\"Qwen3DSparkModel\"] or "
                        "[\"DFlash2DraftModel\"], got [\"Qwen3DSparkModel\",\"DFlashDraftModel\"]"),
            std::string::npos)
      << err(j);
  d = tiny_drafter_config_json();
  d["architectures"] = {"DSparkDraftModel"};
  EXPECT_NE(err(d).find("d.json: field 'architectures': expected [\"DFlashDraftModel\"], [\"Qwen3DSparkModel\"] or "
                        "[\"DFlash2DraftModel\"], got"),
            std::string::npos)
      << err(d);
}
