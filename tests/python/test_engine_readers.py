"""engine_readers.py on hand-built folders: each engine's reading of the cases issue 38 names (a draft-vocabulary
head, a last-layer id, block_size at one level only) and of the family contracts (DeepSpec-flat DSpark, z-lab
DFlash2), so the readers the export contract tests rely on are themselves pinned down."""
import json

import pytest
import torch
from safetensors.torch import save_file

import engine_readers as er

H, V, L = 16, 50, 2
TARGET = {"num_hidden_layers": 6, "vocab_size": V, "hidden_size": H}


def base_config(**over):
    c = dict(architectures=["DFlashDraftModel"], model_type="qwen3", hidden_size=H, intermediate_size=32,
             num_attention_heads=2, num_key_value_heads=1, head_dim=8, num_hidden_layers=L, vocab_size=V,
             rms_norm_eps=1e-6, block_size=4, num_target_layers=6, max_position_embeddings=128,
             layer_types=["full_attention"] * L, tie_word_embeddings=False,
             dflash_config={"mask_token_id": V - 1, "target_layer_ids": [1, 3]})
    c.update(over)
    return c


def write(tmp_path, config, tensors):
    (tmp_path / "config.json").write_text(json.dumps(config))
    save_file({k: v.contiguous() for k, v in tensors.items()}, str(tmp_path / "model.safetensors"))
    return tmp_path


def zeros(shapes):
    return {k: torch.zeros(v) for k, v in shapes.items()}


def dflash_folder(tmp_path, config=None, extra=None):
    config = config or base_config()
    t = zeros(er.backbone_params(config, len(config["dflash_config"]["target_layer_ids"])))
    t.update(extra or {})
    return write(tmp_path, config, t)


def test_a_plain_dflash_export_is_read_as_written_by_every_engine(tmp_path):
    reads = er.read_all(dflash_folder(tmp_path), TARGET)
    for engine, r in reads.items():
        assert r.loads and r.family == "dflash" and not r.missing and not r.silent, (engine, r)
        assert r.settings["target_layer_ids"] == [1, 3] and r.settings["mask_token_id"] == V - 1, engine
        assert r.settings["block_size"] == 4, engine
    assert reads["vllm"].settings["capture_ids"] == [2, 4] and reads["vllm"].settings["num_draft_tokens"] == 3


def test_block_size_only_inside_dflash_config(tmp_path):
    c = base_config()
    del c["block_size"]
    c["dflash_config"]["block_size"] = 8
    reads = er.read_all(dflash_folder(tmp_path, c), TARGET)
    assert reads["zlab"].settings["block_size"] == 8 and reads["sglang"].settings["block_size"] == 8
    assert reads["speculators"].settings["block_size"] == 8
    # llama.cpp (0.3.36's converter) reads dflash_config's block_size first, as run in test_llama_cpp_engine.py
    assert reads["llama.cpp"].settings["block_size"] == 8 and not reads["llama.cpp"].silent
    assert not reads["specforge"].loads


def test_a_draft_vocabulary_export_is_read_only_by_vllm(tmp_path):
    K = 20
    c = base_config(draft_vocab_size=K)
    extra = {"lm_head.weight": torch.zeros(K, H), "d2t": torch.zeros(K, dtype=torch.long),
             "t2d": torch.zeros(V, dtype=torch.bool)}
    reads = er.read_all(dflash_folder(tmp_path, c, extra), TARGET)
    v = reads["vllm"]
    assert v.loads and v.settings["head"] == "draft" and v.settings["d2t"] and v.settings["draft_vocab_size"] == K
    assert v.mapped["d2t"] == "draft_id_to_target_id" and "t2d" in v.ignored
    assert reads["sglang"].loads and reads["sglang"].silent and "d2t" in reads["sglang"].ignored
    assert reads["zlab"].loads and reads["zlab"].silent and "lm_head.weight" in reads["zlab"].reported
    assert not reads["speculators"].loads and any("lm_head" in e for e in reads["speculators"].errors)
    assert not reads["llama.cpp"].loads
    assert reads["specforge"].silent


def test_the_targets_last_layer_as_a_feature_layer(tmp_path):
    c = base_config()
    c["dflash_config"]["target_layer_ids"] = [1, 5]
    reads = er.read_all(dflash_folder(tmp_path, c), TARGET)
    assert not reads["sglang"].loads and not reads["vllm"].loads
    s = reads["speculators"]
    assert s.silent and not s.loads and s.settings["capture_ids"] == [2]   # 6 dropped, then fc does not fit


def test_vllm_reads_max_position_embeddings_and_the_causal_rule(tmp_path):
    c = base_config(layer_types=["sliding_attention", "full_attention"], sliding_window=8)
    del c["max_position_embeddings"]
    r = er.vllm(dflash_folder(tmp_path, c), TARGET, v2_runner=False)
    assert not r.loads and r.settings["layer_causal"] == [True, False]
    r = er.vllm(tmp_path, TARGET)
    assert r.loads and r.settings["max_position_embeddings"] == 32768 and r.notes


# ---------------------------------------------------------------------------------------------------- DSpark ---

def dspark_folder(tmp_path, head="vanilla", confidence=True, **over):
    r = 4
    c = base_config(architectures=["Qwen3DSparkModel"], block_size=7, mask_token_id=V - 1, target_layer_ids=[1, 3],
                    markov_rank=r, markov_head_type=head, enable_confidence_head=confidence,
                    confidence_head_with_markov=True, num_anchors=512)
    del c["dflash_config"]
    c.update(over)
    t = zeros(er.backbone_params(c, 2))
    t.update(zeros(er.dspark_params(c, head, r, confidence, True)))
    t.update({"embed_tokens.weight": torch.zeros(V, H), "lm_head.weight": torch.zeros(V, H)})
    return write(tmp_path, c, t)


def test_a_deepspec_flat_dspark_export(tmp_path):
    reads = er.read_all(dspark_folder(tmp_path), TARGET)
    for engine in ("sglang", "vllm", "llama.cpp"):
        r = reads[engine]
        assert r.loads and r.family == "dspark" and r.settings["markov_rank"] == 4, (engine, r.errors)
        assert r.settings["target_layer_ids"] == [1, 3] and r.settings["mask_token_id"] == V - 1, engine
    assert reads["sglang"].settings["num_draft_tokens"] == 8 and reads["vllm"].settings["num_draft_tokens"] == 7
    assert "lm_head.weight" in reads["sglang"].ignored and "embed_tokens.weight" in reads["llama.cpp"].ignored
    assert not reads["zlab"].loads and not reads["speculators"].loads
    assert reads["specforge"].settings["markov_rank"] == 0 and reads["specforge"].silent


@pytest.mark.parametrize("head", ["gated", "rnn"])
def test_only_sglang_serves_the_gated_and_rnn_heads(tmp_path, head):
    reads = er.read_all(dspark_folder(tmp_path, head), TARGET)
    assert reads["sglang"].loads and reads["sglang"].settings["markov_head_type"] == head
    assert not reads["vllm"].loads and not reads["llama.cpp"].loads


def test_sglang_builds_the_confidence_head_whatever_the_config_says(tmp_path):
    r = er.sglang(dspark_folder(tmp_path, confidence=False), TARGET)
    assert not r.loads and any("confidence" in e for e in r.errors)
    v = er.vllm(tmp_path, TARGET)
    assert v.loads and not v.settings["confidence_head"]


def test_sglang_refuses_speculators_format_dspark(tmp_path):
    r = er.sglang(dspark_folder(tmp_path, speculators_model_type="dspark"), TARGET)
    assert not r.loads


# --------------------------------------------------------------------------------------------------- DFlash2 ---

def dflash2_folder(tmp_path, codebook_suffix="", **dc):
    c = base_config(architectures=["DFlash2DraftModel"], is_causal=False)
    del c["block_size"]
    c["dflash_config"].update(block_size=4, conv_kernel_size=2, conv_group_size=4, selector_rank=3, selector_top_k=5)
    c["dflash_config"].update(dc)
    t = zeros(er.backbone_params(c, 2))
    t.update(zeros(er.dflash2_params(c, 2, 4, 3, codebook_suffix=codebook_suffix)))
    return write(tmp_path, c, t)


def test_a_zlab_contract_dflash2_export(tmp_path):
    reads = er.read_all(dflash2_folder(tmp_path), TARGET)
    z = reads["zlab"]
    assert z.loads and not z.missing and not z.reported and z.settings["layer_causal"] == [False, False]
    assert z.mapped["candidate_selector.predecessor_codebook"] == "candidate_selector.predecessor_codebook.weight"
    v = reads["vllm"]
    assert v.loads and not v.silent and v.settings["block_size"] == 4 and v.settings["selector_top_k"] == 5
    g = reads["sglang"]
    assert g.loads and g.family == "dflash2" and not g.missing and not g.ignored and not g.silent
    assert g.settings["layer_causal"] == [False, False] and g.settings["block_size"] == 4
    assert not reads["speculators"].loads


def test_codebooks_with_a_weight_suffix(tmp_path):
    reads = er.read_all(dflash2_folder(tmp_path, codebook_suffix=".weight"), TARGET)
    assert reads["zlab"].loads and not reads["zlab"].missing      # transformers 5 maps both spellings
    assert not reads["vllm"].loads
    g = reads["sglang"]                                           # ignored: the codebooks stay zero, no selector
    assert g.loads and "candidate_selector.successor_codebook.weight" in g.ignored and g.silent


def test_vllm_runs_the_dflash2_convs_on_its_own_block(tmp_path):
    r = er.vllm(dflash2_folder(tmp_path), TARGET, num_speculative_tokens=7)
    assert r.loads and r.silent and r.settings["block_size"] == 8


def test_is_causal_false_makes_sliding_layers_non_causal_unlike_training(tmp_path):
    """Training makes a sliding layer causal inside its block and a full layer bidirectional. Without is_causal,
    z-lab, SGLang and vLLM do the same; is_causal false makes every layer bidirectional: a silent misread."""
    f = dflash2_folder(tmp_path)
    c = json.loads((f / "config.json").read_text())
    c.update(layer_types=["sliding_attention", "full_attention"], sliding_window=8)
    for is_causal, causal in ((None, [True, False]), (False, [False, False])):
        c.pop("is_causal", None)
        if is_causal is not None:
            c["is_causal"] = is_causal
        (f / "config.json").write_text(json.dumps(c))
        for engine in ("zlab", "sglang", "vllm"):
            r = er.read(engine, f, TARGET)
            assert r.settings["layer_causal"] == causal, (engine, is_causal)
            assert bool([m for m in r.silent if m.startswith("layer causality")]) == (is_causal is not None), \
                (engine, r.silent)
