"""`dflash plan --draft-vocab K` meets the drafter's source under the spec's rule (drafter/sourced_spec.h), 0 included:
an explicit `--draft-vocab 0` (the full vocabulary) beside a drafter config's draft_vocab_size is an error naming
both sources, as `--block-size` is (the file's K used to survive the flag without a word); the same value is fine;
a drafter without a draft vocabulary takes the flag's."""
import json
import subprocess

import pytest

DRAFTER = {"architectures": ["DFlashDraftModel"], "model_type": "qwen3", "block_size": 4, "num_target_layers": 8,
           "num_hidden_layers": 2, "dflash_config": {"mask_token_id": 31, "target_layer_ids": [1, 5]},
           "hidden_size": 16, "intermediate_size": 24, "num_attention_heads": 4, "num_key_value_heads": 2,
           "head_dim": 4, "rms_norm_eps": 1e-6, "rope_theta": 10000.0, "vocab_size": 32}


def plan(dflash_bin, cwd, *args):
    return subprocess.run([dflash_bin, "plan", *args], capture_output=True, text=True, timeout=120, cwd=cwd)


@pytest.fixture()
def configs(tmp_path):
    (tmp_path / "k8.json").write_text(json.dumps(dict(DRAFTER, draft_vocab_size=8)))
    (tmp_path / "full.json").write_text(json.dumps(DRAFTER))
    return tmp_path


@pytest.mark.parametrize("flag,source", [("0", "flag --draft-vocab"),
                                         ("32", "flag --draft-vocab 32: the full vocabulary"),
                                         ("4", "flag --draft-vocab")])
def test_a_draft_vocab_flag_that_differs_from_the_config_names_both(dflash_bin, configs, flag, source):
    out = plan(dflash_bin, configs, "--config", "k8.json", "--draft-vocab", flag)
    assert out.returncode == 1, out.stderr
    value = "4" if flag == "4" else "0"
    assert out.stderr.strip().splitlines() == [
        f"dflash: error: plan: 'draft_vocab' is {value} ({source}) but 8 (drafter config k8.json); give it once, "
        "or the same in both"], out.stderr


def test_the_same_draft_vocab_or_none_given_is_fine(dflash_bin, configs):
    for args in (["--draft-vocab", "8"], []):
        out = plan(dflash_bin, configs, "--config", "k8.json", "--json", *args)
        assert out.returncode == 0, out.stderr
        assert json.loads(out.stdout)["drafter_config"]["draft_vocab_size"] == 8
    # A drafter config without a draft vocabulary takes the flag's, 0 included.
    out = plan(dflash_bin, configs, "--config", "full.json", "--json", "--draft-vocab", "8")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["drafter_config"]["draft_vocab_size"] == 8
    out = plan(dflash_bin, configs, "--config", "full.json", "--json", "--draft-vocab", "0")
    assert out.returncode == 0, out.stderr
    assert "draft_vocab_size" not in json.loads(out.stdout)["drafter_config"]
