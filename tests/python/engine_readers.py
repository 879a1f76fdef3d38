"""How each serving engine and converter reads an exported drafter folder (config.json + model.safetensors), written
in our own words from reading their code (issue 38, item 4). One function per engine; each returns an EngineRead:
the settings the engine resolves (names, nesting, lookup order, defaults as it applies them), the tensors it maps,
the ones it drops silently or with a warning, the ones it expects and does not find, what makes it fail, and what it
would run differently from the folder's own config without a word. A contract test asserts that our export is read
exactly as trained: `read(engine, folder, target=...)` then compare `settings` with the run's config.

Index conventions, spelled out because the engines differ: `target_layer_ids` in `settings` are always LAYER
indices (layer i's output is HF hidden_states[i + 1]); `capture_ids` are the engine's own hidden-state indices
(= layer id + 1 for SGLang, vLLM and speculators). Sources are repository + path + the commit read; [I] marks
behaviour inferred from surrounding code rather than read in the function itself.

Nothing here imports an engine: the readers are plain Python over the folder's JSON and safetensors header.
"""
import json
import pathlib
import re
import struct
from dataclasses import dataclass, field
from typing import Optional

ENGINES = ("sglang", "vllm", "llama.cpp", "zlab", "speculators", "specforge")
FAMILIES = ("dflash", "dspark", "dflash2")
SERVES = {  # which families each engine reads today (see docs/SERVING.md for the sources)
    "sglang": ("dflash", "dspark", "dflash2"),
    "vllm": ("dflash", "dspark", "dflash2"),
    "llama.cpp": ("dflash", "dspark", "dflash2"),
    "zlab": ("dflash", "dflash2"),
    "speculators": ("dflash",),
    "specforge": ("dflash", "dspark", "dflash2"),
}


@dataclass
class EngineRead:
    engine: str
    family: Optional[str]                          # the family the engine takes the folder for; None = not served
    source: str                                    # repository, path and commit the behaviour was read at
    settings: dict = field(default_factory=dict)   # what the engine resolves (keys: see _settings_doc below)
    mapped: dict = field(default_factory=dict)     # checkpoint tensor -> the engine's parameter (or GGUF) name
    missing: list = field(default_factory=list)    # parameters the engine builds and the folder does not fill
    ignored: list = field(default_factory=list)    # checkpoint tensors dropped without a word
    reported: list = field(default_factory=list)   # checkpoint tensors dropped (or params left fresh) with a warning
    errors: list = field(default_factory=list)     # the engine refuses the folder, or fails at load / first step
    silent: list = field(default_factory=list)     # it runs, but not as the folder's config says it was trained
    notes: list = field(default_factory=list)

    @property
    def loads(self):
        return not self.errors


_settings_doc = """settings keys: family, block_size (the block the engine runs), num_draft_tokens (what it verifies
per step, engine-specific meaning noted), target_layer_ids, capture_ids, mask_token_id, head ("target" = drafts with
the target's LM head, "draft" = with the folder's lm_head), draft_vocab_size, d2t (bool: remaps draft ids),
max_position_embeddings, layer_causal (per layer), sliding_window, markov_rank, markov_head_type,
confidence_head, confidence_head_with_markov, conv_kernel_size, conv_group_size, selector_rank, selector_top_k,
output_multiplier, final_logit_softcapping, input_embedding_scale."""


# ---------------------------------------------------------------------------------------------------------------
# The folder
# ---------------------------------------------------------------------------------------------------------------

def read_folder(folder):
    """(config dict, {tensor name: (dtype, shape)}) from config.json and model.safetensors' header only."""
    folder = pathlib.Path(folder)
    config = json.loads((folder / "config.json").read_text())
    with open(folder / "model.safetensors", "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
    header.pop("__metadata__", None)
    return config, {k: (v["dtype"], tuple(v["shape"])) for k, v in header.items()}


def _dc(config):
    return config.get("dflash_config") or {}


def _text(config):
    return config.get("text_config") or config


def _nested_first(config, key, default=None):
    """dflash_config first, then the top level: z-lab _draft_value, SGLang parse_dflash_draft_config."""
    return _dc(config).get(key, config.get(key, default))


def _num_target_layers(target):
    if target is None:
        return None
    return int(_text(target).get("num_hidden_layers"))


def _target_vocab(target, config):
    return int(_text(target).get("vocab_size")) if target else int(config["vocab_size"])


def _spaced_layer_ids(num_target_layers, num_draft_layers):
    """SGLang build_target_layer_ids / SpecForge build_target_layer_ids (the DFlash paper's spacing)."""
    if num_draft_layers == 1:
        return [num_target_layers // 2]
    span = num_target_layers - 4
    return [int(round(1 + i * span / (num_draft_layers - 1))) for i in range(num_draft_layers)]


def _conv_selector_fields(config):
    dc = _dc(config)
    return {k: dc.get(k) for k in ("conv_kernel_size", "conv_group_size", "selector_rank", "selector_top_k")}


# ---------------------------------------------------------------------------------------------------------------
# Parameters each family builds, with shapes from the config (checkpoint names, no prefix)
# ---------------------------------------------------------------------------------------------------------------

def backbone_params(config, n_features, target_hidden=None):
    d = int(config["hidden_size"])
    hq, hkv = int(config["num_attention_heads"]), int(config["num_key_value_heads"])
    hd = int(config.get("head_dim") or d // hq)
    inter = int(config["intermediate_size"])
    p = {"fc.weight": (d, n_features * int(target_hidden or d)), "hidden_norm.weight": (d,), "norm.weight": (d,)}
    for i in range(int(config["num_hidden_layers"])):
        L = f"layers.{i}."
        p.update({L + "input_layernorm.weight": (d,), L + "post_attention_layernorm.weight": (d,),
                  L + "self_attn.q_proj.weight": (hq * hd, d), L + "self_attn.k_proj.weight": (hkv * hd, d),
                  L + "self_attn.v_proj.weight": (hkv * hd, d), L + "self_attn.o_proj.weight": (d, hq * hd),
                  L + "self_attn.q_norm.weight": (hd,), L + "self_attn.k_norm.weight": (hd,),
                  L + "mlp.gate_proj.weight": (inter, d), L + "mlp.up_proj.weight": (inter, d),
                  L + "mlp.down_proj.weight": (d, inter)})
    return p


def dspark_params(config, head_type, rank, confidence, with_markov, draft_vocab=None):
    d, V = int(config["hidden_size"]), int(config["vocab_size"])
    p = {"markov_head.markov_w1.weight": (V, rank), "markov_head.markov_w2.weight": (int(draft_vocab or V), rank)}
    if head_type == "gated":
        p.update({"markov_head.gate_proj.weight": (rank, d + rank), "markov_head.gate_proj.bias": (rank,)})
    if head_type == "rnn":
        p.update({"markov_head.joint_proj.weight": (3 * rank, 2 * rank + d),
                  "markov_head.joint_proj.bias": (3 * rank,)})
    if confidence:
        p.update({"confidence_head.proj.weight": (1, d + (rank if with_markov else 0)),
                  "confidence_head.proj.bias": (1,)})
    return p


def dflash2_params(config, kernel, group, rank, codebook_suffix=""):
    d, V = int(config["hidden_size"]), int(config["vocab_size"])
    p = {}
    for i in range(int(config["num_hidden_layers"])):
        for conv in ("attention_conv", "mlp_conv"):
            p[f"layers.{i}.{conv}.base_kernel"] = (2, kernel, d)
            p[f"layers.{i}.{conv}.kernel_projection.weight"] = (2 * kernel * (d // group), d)
    p["candidate_selector.hidden_projection.weight"] = (rank, d)
    p["candidate_selector.predecessor_codebook" + codebook_suffix] = (V, rank)
    p["candidate_selector.successor_codebook" + codebook_suffix] = (V, rank)
    return p


def _match(r, tensors, expected, rename=lambda n: n, unknown="error", shape_errors=True):
    """Map checkpoint tensors onto expected parameters: renamed names that exist are mapped (a shape mismatch is an
    error where the engine's loader checks shapes), the others go to `unknown` ('error' | 'ignored' | 'reported'),
    and expected parameters nobody filled go to r.missing."""
    filled = set()
    for name, (_, shape) in sorted(tensors.items()):
        target = rename(name)
        if target is None:
            continue
        if target in expected:
            filled.add(target)
            r.mapped[name] = target
            if shape_errors and tuple(expected[target]) != tuple(shape):
                r.errors.append(f"{name}: shape {list(shape)}, the engine builds {list(expected[target])}")
        elif unknown == "error":
            r.errors.append(f"{name}: no such parameter in the engine's model")
        else:
            getattr(r, unknown).append(name)
    r.missing.extend(sorted(set(expected) - filled))


def _has_draft_vocab(config, tensors):
    """A reduced drafting vocabulary: draft_vocab_size below vocab_size, a d2t map, or an lm_head of other rows."""
    V = int(config["vocab_size"])
    head = tensors.get("lm_head.weight")
    return bool((config.get("draft_vocab_size") or V) != V or "d2t" in tensors or (head and head[1][0] != V))


def _family_of(config):
    arch = (config.get("architectures") or [""])[0]
    if arch in ("Qwen3DSparkModel", "DSparkDraftModel"):
        return "dspark"
    if arch == "DFlash2DraftModel":
        return "dflash2"
    if arch == "DFlashDraftModel":
        return "dflash2" if any(v is not None for v in _conv_selector_fields(config).values()) else "dflash"
    return None


def _layer_types(config):
    n = int(config["num_hidden_layers"])
    return list(config.get("layer_types") or ["full_attention"] * n)


def _trained_causal(config):
    """Per layer, whether our training makes its block causal: a sliding_attention layer's slot j sees slots <= j of
    its block, a full_attention layer the whole block (src/kernels/anchor_mask.h, docs/DFLASH.md)."""
    return [t == "sliding_attention" for t in _layer_types(config)]


def _check_causality(r, config):
    """A silent misread when the engine's per-layer causality (settings['layer_causal']) is not the trained one."""
    got, want = r.settings.get("layer_causal"), _trained_causal(config)
    if got is not None and got != want:
        r.silent.append(f"layer causality {got}, trained {want}: is_causal {config.get('is_causal')!r} sets every "
                        "layer (absent, sliding layers are causal and full layers are not, as trained)")


# ---------------------------------------------------------------------------------------------------------------
# z-lab transformers code
# ---------------------------------------------------------------------------------------------------------------

def zlab(folder, target=None):
    """z-lab/dflash dflash/model.py @10129599 (DFlashDraftModel, DFlash2DraftModel; `from_pretrained` of the class,
    not AutoModel). _draft_value reads dflash_config first, then the top level, then a default; the context
    feature of layer id is hidden_states[id + 1]; the embedding and LM head are always the TARGET's
    (_raw_input_embeddings, _output_head): an exported lm_head / d2t / t2d is unused (HF warns)."""
    config, tensors = read_folder(folder)
    family = _family_of(config)
    arch = (config.get("architectures") or [""])[0]
    r = EngineRead("zlab", None, "z-lab/dflash dflash/model.py @10129599dffb338ff38cfd235a53ca6d3667b4dd")
    if arch not in ("DFlashDraftModel", "DFlash2DraftModel"):
        r.errors.append(f"architectures {arch!r}: z-lab defines DFlashDraftModel and DFlash2DraftModel only "
                        "(no DSpark)")
        return r
    family = "dflash2" if arch == "DFlash2DraftModel" else "dflash"
    r.family = family
    s = r.settings
    s["family"] = family
    s["block_size"] = int(_nested_first(config, "block_size", 16))
    s["num_draft_tokens"] = s["block_size"] - 1            # slots 1..B-1 are drafts; the target verifies B
    s["mask_token_id"] = _nested_first(config, "mask_token_id")
    ids = _nested_first(config, "target_layer_ids")
    if ids is None:
        r.errors.append("dflash_config.target_layer_ids: required (ValueError in DFlashDraftModel.__init__)")
        return r
    s["target_layer_ids"] = [int(i) for i in ids]
    s["capture_ids"] = [i + 1 for i in s["target_layer_ids"]]
    s["head"], s["d2t"] = "target", False
    s["draft_vocab_size"] = None
    is_causal = config.get("is_causal")
    s["layer_causal"] = [t == "sliding_attention" if is_causal is None else bool(is_causal)
                         for t in _layer_types(config)]
    _check_causality(r, config)
    s["sliding_window"] = config.get("sliding_window")
    s["max_position_embeddings"] = config.get("max_position_embeddings", 32768)   # Qwen3Config's default [I]
    s["input_embedding_scale"] = float(_nested_first(config, "input_embedding_scale", 1.0))
    s["output_multiplier"] = float(_nested_first(config, "output_multiplier", 1.0))
    cap = _nested_first(config, "final_logit_softcapping")
    s["final_logit_softcapping"] = float(cap) if cap is not None and float(cap) > 0 else None
    expected = backbone_params(config, len(ids))
    rename = lambda n: n  # noqa: E731
    if family == "dflash2":
        for key in ("conv_kernel_size", "conv_group_size", "selector_rank", "selector_top_k"):
            v = _nested_first(config, key)
            if v is None:
                r.errors.append(f"dflash_config.{key}: required by DFlash2DraftModel (int(None))")
            s[key] = None if v is None else int(v)
        if r.errors:
            return r
        expected.update(dflash2_params(config, s["conv_kernel_size"], s["conv_group_size"], s["selector_rank"],
                                       codebook_suffix=".weight"))

        # from_pretrained(key_mapping={"candidate_selector.X": "candidate_selector.X.weight"}) maps the bare names
        # onto the nn.Embedding weights; with transformers 5.24 a key that already ends in .weight loads too
        # (checked in a scratch run). vLLM and SGLang do not forgive the suffix: see their readers.
        def rename(n):
            for cb in ("predecessor_codebook", "successor_codebook"):
                if n == f"candidate_selector.{cb}":
                    return n + ".weight"
            return n
    for name in tensors:
        if name in ("lm_head.weight", "d2t", "t2d") or name.startswith("embed_tokens"):
            r.notes.append(f"{name}: unused, z-lab drafts with the target's embedding and LM head")
    _match(r, tensors, expected, rename, unknown="reported")
    if r.missing:
        r.notes.append("missing parameters are left as HF initialises them (a warning, not an error)")
    if _has_draft_vocab(config, tensors):
        r.silent.append("draft vocabulary: z-lab drafts over the target's full vocabulary with the target's head")
    if config.get("block_size") is not None and _dc(config).get("block_size") is not None and \
            int(config["block_size"]) != int(_dc(config)["block_size"]):
        r.silent.append("block_size differs between dflash_config and the top level: z-lab uses dflash_config's")
    return r


# ---------------------------------------------------------------------------------------------------------------
# SGLang
# ---------------------------------------------------------------------------------------------------------------

def _sglang_stacked(name):
    """SGLang load_weights: q/k/v_proj -> qkv_proj shards, gate/up_proj -> gate_up_proj; a 'model.' prefix is
    stripped or added as needed. The checkpoint name stays the key of `mapped`."""
    return name[len("model."):] if name.startswith("model.") else name


def sglang(folder, target=None, num_draft_tokens=None):
    """sgl-project/sglang, read at two versions. python/sglang/srt/models/dflash.py of the DFlash2 era (index copy,
    commit not shown; @003b23d7 before it): DFlashDraftModel builds the grouped convs whenever
    dflash_config.conv_kernel_size is set (identity-initialised), DFlash2DraftModel adds the selector (codebooks
    zero-initialised, bare names), is_causal (top level) decides causality else sliding layers are causal,
    load_weights ignores unknown names without a word and checks only fc.weight's shape; set_block_size lets
    --speculative-num-draft-tokens move the conv block. speculative/dflash_utils.py @00731f0b
    (parse_dflash_draft_config: dflash_config first, then the top level; conv/selector/output fields from
    dflash_config only). models/dspark.py + speculative/dspark_components/dspark_config.py @01f47623 (DSpark).
    Flags: --speculative-algorithm DFLASH (DFlash, DFlash2) or DSPARK; --speculative-num-draft-tokens."""
    config, tensors = read_folder(folder)
    arch = (config.get("architectures") or [""])[0]
    r = EngineRead("sglang", None, "sgl-project/sglang models/dflash.py (DFlash2 era; @003b23d7 before), "
                                   "speculative/dflash_utils.py @00731f0b, models/dspark.py + "
                                   "dspark_components/dspark_config.py @01f47623")
    classes = {"DFlashDraftModel": "dflash", "DFlash2DraftModel": "dflash2", "Qwen3DSparkModel": "dspark"}
    if arch not in classes:
        r.errors.append(f"architectures {arch!r}: SGLang registers DFlashDraftModel, DFlash2DraftModel (DFLASH) "
                        "and Qwen3DSparkModel (DSPARK)")
        return r
    family = classes[arch]
    r.family = family
    s = r.settings
    s["family"] = family
    dc = _dc(config)
    n_layers = int(_text(config)["num_hidden_layers"])
    ntl = dc.get("num_target_layers", config.get("num_target_layers"))
    block = dc.get("block_size", config.get("block_size"))
    ids = dc.get("target_layer_ids", config.get("target_layer_ids"))
    mask = dc.get("mask_token_id", config.get("mask_token_id"))
    if family == "dspark":
        if config.get("speculators_model_type") == "dspark":
            r.errors.append("speculators_model_type 'dspark': refused (slot alignment differs, sglang#30261)")
        block = config.get("dspark_block_size", block)
        ids = config.get("dspark_target_layer_ids", ids)
        dsc = config.get("dspark_config") or {}
        rank = config.get("dspark_markov_rank", dsc.get("markov_rank", _text(config).get("markov_rank", 0)))
        head = config.get("dspark_markov_head_type",
                          dsc.get("markov_head_type", _text(config).get("markov_head_type")))
        mask = config.get("dspark_noise_token_id", dsc.get("mask_token_id", _text(config).get("mask_token_id", mask)))
        s["markov_rank"] = int(rank or 0)
        s["markov_head_type"] = None if head is None else str(head).lower()
        if s["markov_rank"] <= 0:
            r.errors.append("markov_rank: DSpark requires > 0 (dspark_markov_rank, dspark_config, text_config, "
                            "top level, in that order)")
        elif s["markov_head_type"] is None:
            r.errors.append("markov_head_type: required when markov_rank > 0")
        elif s["markov_head_type"] not in ("vanilla", "gated", "rnn"):
            r.errors.append(f"markov_head_type {head!r}: vanilla, gated or rnn")
        # build_confidence_head does not read enable_confidence_head's value (only warns when the key is absent):
        # the head is built unless ragged verify is STATIC, and then its weights are required
        s["confidence_head"] = True
        s["confidence_head_with_markov"] = bool(config.get("confidence_head_with_markov", s["markov_rank"] > 0))
        if "enable_confidence_head" not in config:
            r.notes.append("enable_confidence_head missing: SGLang warns and builds the head anyway")
        gamma = int(block) if block is not None else None
        if num_draft_tokens is not None:
            gamma = int(num_draft_tokens) - 1
            if block is not None and int(block) != gamma:
                r.silent.append(f"--speculative-num-draft-tokens {num_draft_tokens} gives gamma {gamma}, the "
                                f"checkpoint's block_size is {block} (a warning only)")
        if gamma is None:
            r.errors.append("block_size: DSpark cannot resolve gamma (no dspark_block_size / block_size and no "
                            "--speculative-num-draft-tokens)")
        s["block_size"] = gamma
        s["num_draft_tokens"] = None if gamma is None else gamma + 1   # verify window = gamma + 1
        if mask is None:
            r.errors.append("mask_token_id: DSpark requires it in the draft config")
    else:
        trained = int(block) if block is not None else 16
        s["block_size"] = trained if num_draft_tokens is None else int(num_draft_tokens)   # set_block_size
        s["num_draft_tokens"] = s["block_size"]       # the DFLASH verify width: anchor + B-1 drafts [I]
        if s["block_size"] != trained and dc.get("conv_kernel_size"):
            r.silent.append(f"--speculative-num-draft-tokens {num_draft_tokens}: the convs run on blocks of "
                            f"{s['block_size']}, trained with {trained}")
        if mask is None:
            r.notes.append("mask_token_id absent: SGLang resolves dflash_config.mask_token (default '<|MASK|>') "
                           "with the target tokenizer [I]")
    s["mask_token_id"] = None if mask is None else int(mask)
    tnl = _num_target_layers(target) or (int(ntl) if ntl is not None else n_layers)
    if ids is None:
        ids = _spaced_layer_ids(tnl, n_layers)
        r.notes.append(f"target_layer_ids absent: SGLang spaces them over {tnl} target layers")
    s["target_layer_ids"] = [int(i) for i in ids]
    s["capture_ids"] = [i + 1 for i in s["target_layer_ids"]]     # SGLang captures "before layer i"
    for i in s["target_layer_ids"]:
        if target is not None and not 0 <= i < tnl:
            r.errors.append(f"target_layer_ids {i}: out of range for {tnl} target layers")
        elif target is not None and i == tnl - 1:
            r.errors.append(f"target_layer_ids {i} is the target's last layer: capture index {tnl} is past the last "
                            "layer boundary, fewer features than fc expects (target_hidden feature dim mismatch) [I]")
    s["head"], s["d2t"], s["draft_vocab_size"] = "target", False, None
    s["max_position_embeddings"] = int(config.get("max_position_embeddings", 32768))
    types = _layer_types(config)
    is_causal = _text(config).get("is_causal")
    s["layer_causal"] = [t == "sliding_attention" if is_causal is None else bool(is_causal) for t in types]
    _check_causality(r, config)
    s["sliding_window"] = config.get("sliding_window")
    if "sliding_attention" in types and s["sliding_window"] is None:
        r.errors.append("sliding_window: required by sliding_attention layers")
    expected = backbone_params(config, len(s["target_layer_ids"]))
    if family in ("dflash", "dflash2"):
        f = {k: int(dc.get(k, 0) or 0) for k in ("conv_kernel_size", "conv_group_size", "selector_rank",
                                                 "selector_top_k")}
        if bool(f["conv_kernel_size"]) != bool(f["conv_group_size"]):
            r.errors.append("conv_kernel_size and conv_group_size: both or neither")
        if bool(f["selector_rank"]) != bool(f["selector_top_k"]):
            r.errors.append("selector_rank and selector_top_k: both or neither")
        if family == "dflash2" and not f["selector_rank"]:
            r.errors.append("DFlash2DraftModel requires dflash_config.selector_rank")
        if r.errors:
            return r
        if f["conv_kernel_size"]:
            s.update(conv_kernel_size=f["conv_kernel_size"], conv_group_size=f["conv_group_size"])
            conv = dflash2_params(config, f["conv_kernel_size"], f["conv_group_size"], 1)
            expected.update({k: v for k, v in conv.items() if "_conv." in k})
        if family == "dflash2":
            s.update(selector_rank=f["selector_rank"], selector_top_k=f["selector_top_k"])
            sel = dflash2_params(config, 1, 1, f["selector_rank"])
            expected.update({k: v for k, v in sel.items() if k.startswith("candidate_selector.")})
            s["output_multiplier"] = float(dc.get("output_multiplier", 1.0))
            cap = float(dc.get("final_logit_softcapping") or 0.0)
            s["final_logit_softcapping"] = cap if cap > 0 else None
        elif f["selector_rank"]:
            r.silent.append("selector fields under DFlashDraftModel: no selector is built (DFlash2DraftModel does)")
    if family == "dspark" and s.get("markov_head_type") in ("vanilla", "gated", "rnn"):
        dspark = dspark_params(config, s["markov_head_type"], s["markov_rank"], True,
                               s["confidence_head_with_markov"])
        for name in sorted(tensors):
            if name.split(".")[0] in ("embed_tokens", "lm_head", "rotary_emb"):
                r.ignored.append(name)
            elif name.startswith("markov_head.") and name not in dspark:
                r.errors.append(f"{name}: not a parameter of the {s['markov_head_type']} Markov head")
        missing_conf = sorted(n for n in dspark if n.startswith("confidence_head.") and n not in tensors)
        if missing_conf:
            r.errors.append(f"confidence head enabled but the checkpoint lacks {missing_conf}")
        expected.update(dspark)
        tensors = {k: v for k, v in tensors.items() if k.split(".")[0] not in ("embed_tokens", "lm_head",
                                                                              "rotary_emb")}
    _match(r, tensors, expected, _sglang_stacked, unknown="ignored")
    if r.missing:
        fresh = [m for m in r.missing if "_conv." in m or m.startswith("candidate_selector.")]
        if fresh:
            r.silent.append(f"not in the checkpoint, left at their init (identity convs, zero codebooks: plain "
                            f"DFlash there): {fresh}")
        if len(fresh) < len(r.missing):
            r.notes.append("SGLang does not check for missing weights: they stay uninitialised [I]")
    if _has_draft_vocab(config, tensors):
        r.silent.append("draft vocabulary: SGLang drafts with the target's LM head; lm_head/d2t/t2d are ignored")
    return r


# ---------------------------------------------------------------------------------------------------------------
# vLLM
# ---------------------------------------------------------------------------------------------------------------

def _vllm_aux_layers(config):
    """vllm/v1/worker/gpu/spec_decode/eagle/eagle3_utils.py @0cfdd2e1 get_eagle3_aux_layers_from_config:
    eagle_aux_hidden_state_layer_ids as is, else dflash_config.target_layer_ids + 1, else dspark_target_layer_ids + 1,
    else top-level target_layer_ids + 1, else dflash_config / eagle_config layer_ids; None = the model default."""
    ids = config.get("eagle_aux_hidden_state_layer_ids")
    if not ids and (_dc(config).get("target_layer_ids")):
        ids = [i + 1 for i in _dc(config)["target_layer_ids"]]
    if not ids and config.get("dspark_target_layer_ids"):
        ids = [i + 1 for i in config["dspark_target_layer_ids"]]
    if not ids and config.get("target_layer_ids"):
        ids = [i + 1 for i in config["target_layer_ids"]]
    if not ids:
        for k in ("dflash_config", "eagle_config"):
            ids = (config.get(k) or {}).get("layer_ids")
            if ids:
                break
    return list(ids) if ids else None


def _vllm_name(name):
    """DFlashQwen3ForCausalLM.load_weights: t2d dropped, d2t -> draft_id_to_target_id, lm_head kept, everything else
    under model.; hf_to_vllm_mapper: midlayer. -> layers.0., encoder.fc. -> fc., q/k/v -> qkv_proj, gate/up ->
    gate_up_proj (the checkpoint name stays the key of `mapped`)."""
    if "t2d" in name:
        return None
    if "d2t" in name:
        return name.replace("d2t", "draft_id_to_target_id")
    if "lm_head" in name:
        return name
    return "model." + name.replace("midlayer.", "layers.0.")


def vllm(folder, target=None, num_speculative_tokens=None, v2_runner=True):
    """vllm-project/vllm model_executor/models/qwen3_dflash.py @036a00d1, qwen3_dflash2.py @030da624,
    qwen3_dspark.py @0302ff40, v1/worker/gpu/spec_decode/eagle/eagle3_utils.py @0cfdd2e1. AutoWeightsLoader raises
    on a name with no parameter; the model loader raises on parameters no weight filled [I: DefaultModelLoader].
    speculative_config: {"method": "dflash" (DFlash, DFlash2) | "dspark", "model": folder,
    "num_speculative_tokens": n}; the query block is 1 + n."""
    config, tensors = read_folder(folder)
    arch = (config.get("architectures") or [""])[0]
    r = EngineRead("vllm", None, "vllm-project/vllm qwen3_dflash.py @036a00d1, qwen3_dflash2.py @030da624, "
                                 "qwen3_dspark.py @0302ff40, eagle3_utils.py @0cfdd2e1")
    registry = {"DFlashDraftModel": "dflash", "DFlash2DraftModel": "dflash2", "Qwen3DSparkModel": "dspark"}
    if arch == "DSparkDraftModel":
        r.errors.append("architectures 'DSparkDraftModel': vLLM maps it to the DeepSeek-V4 DSpark class; a Qwen3 "
                        "backbone must say Qwen3DSparkModel")
        return r
    if arch not in registry:
        r.errors.append(f"architectures {arch!r}: not a vLLM drafter class")
        return r
    family = registry[arch]
    r.family = family
    s = r.settings
    s["family"] = family
    dc = _dc(config)
    if num_speculative_tokens is None:
        # what a user sets from the checkpoint: DFlash verifies the anchor + B-1 drafts, DSpark drafts all B slots
        b = int(_nested_first(config, "block_size", 16))
        num_speculative_tokens = b if family == "dspark" else b - 1
    s["num_draft_tokens"] = int(num_speculative_tokens)
    s["block_size"] = int(num_speculative_tokens) + (0 if family == "dspark" else 1)
    aux = _vllm_aux_layers(config)
    if aux is None:
        r.errors.append("no aux layer ids (eagle_aux_hidden_state_layer_ids / dflash_config.target_layer_ids / "
                        "target_layer_ids): vLLM falls back to the target's default layers")
        return r
    s["capture_ids"] = list(aux)
    s["target_layer_ids"] = [i - 1 for i in aux]
    tnl = _num_target_layers(target)
    if tnl is not None and any(i >= tnl for i in aux):
        r.errors.append(f"aux layer {max(aux)} >= {tnl}: the target never captures it (the last layer's output); "
                        "the drafter gets fewer features than fc expects at the first step [I]")
    s["mask_token_id"] = dc.get("mask_token_id", config.get("mask_token_id"))
    s["max_position_embeddings"] = int(config.get("max_position_embeddings", 32768))   # the RoPE table [I default]
    if "max_position_embeddings" not in config:
        r.notes.append("max_position_embeddings absent: Qwen3Config's 32768 sizes the drafter's RoPE table")
    # _resolve_layer_attention: is_causal, then dflash_config.causal, then sliding layers causal
    types = _layer_types(config)
    causal = config.get("is_causal", dc.get("causal"))
    s["layer_causal"] = [t == "sliding_attention" if causal is None else bool(causal) for t in types]
    _check_causality(r, config)
    n_sliding = sum(t == "sliding_attention" for t in types)
    if 0 < n_sliding < len(types) and not v2_runner:
        r.errors.append("mixed sliding/full drafter layers need the V2 model runner (VLLM_USE_V2_MODEL_RUNNER=1)")
    s["sliding_window"] = dc.get("swa_window_size", config.get("sliding_window"))
    if n_sliding and s["sliding_window"] is None:
        r.errors.append("sliding_attention layers need dflash_config.swa_window_size or sliding_window")
    tv = _target_vocab(target, config)
    dv = config.get("draft_vocab_size") or config["vocab_size"]
    s["draft_vocab_size"] = int(dv)
    s["head"] = "draft" if "lm_head.weight" in tensors else "target"
    s["d2t"] = "d2t" in tensors
    th = config.get("target_hidden_size") or (_text(target).get("hidden_size") if target else None)
    expected = backbone_params(config, len(aux), th)
    if family == "dflash2":
        for key in ("conv_kernel_size", "conv_group_size", "selector_rank", "selector_top_k"):
            if dc.get(key) is None:
                r.errors.append(f"dflash_config.{key}: DFlash2 reads it from dflash_config only (KeyError)")
            s[key] = None if dc.get(key) is None else int(dc[key])
        if r.errors:
            return r
        s["input_embedding_scale"] = float(dc.get("input_embedding_scale", 1.0))
        s["output_multiplier"] = float(dc.get("output_multiplier", 1.0))
        cap = float(dc.get("final_logit_softcapping") or 0.0)
        s["final_logit_softcapping"] = cap if cap > 0 else None
        expected.update(dflash2_params(config, s["conv_kernel_size"], s["conv_group_size"], s["selector_rank"]))
        trained = _nested_first(config, "block_size")
        if trained is not None and int(trained) != s["block_size"]:
            r.silent.append(f"the convs run on blocks of 1 + num_speculative_tokens = {s['block_size']}, trained "
                            f"with {trained}: set num_speculative_tokens = {int(trained) - 1}")
        if not v2_runner:
            r.errors.append("DFlash2 drafters need the V2 model runner")
        r.notes.append("DFlash2 needs an unquantized target LM head for the candidate top-K")
    if family == "dspark":
        if config.get("markov_rank") is None:
            r.errors.append("markov_rank: Qwen3DSparkModel reads the top-level key (AttributeError)")
            return r
        s["markov_rank"] = int(config["markov_rank"])
        s["markov_head_type"] = "vanilla"        # markov_head_type is not read: only W1/W2 exist
        s["confidence_head"] = bool(config.get("enable_confidence_head", False))
        s["confidence_head_with_markov"] = bool(config.get("confidence_head_with_markov", False))
        expected.update(dspark_params(config, "vanilla", s["markov_rank"], s["confidence_head"],
                                      s["confidence_head_with_markov"], draft_vocab=dv))
        if config.get("markov_head_type", "vanilla") != "vanilla":
            r.errors.append(f"markov_head_type {config['markov_head_type']!r}: vLLM builds the vanilla head only "
                            "(its gate/joint weights have no parameter)")
        has_conf = any(n.startswith("confidence_head") for n in tensors)
        if s["confidence_head"] and not has_conf:
            r.silent.append("enable_confidence_head but no confidence weights: the head is dropped")
            s["confidence_head"] = False
            expected = {k: v for k, v in expected.items() if not k.startswith("confidence_head")}
        if not s["confidence_head"]:
            r.ignored.extend(n for n in sorted(tensors) if n.startswith("confidence_head"))
            tensors = {k: v for k, v in tensors.items() if not k.startswith("confidence_head")}
        if dv < tv and "lm_head.weight" not in tensors:
            r.errors.append("reduced-vocabulary DSpark must include lm_head")
        if dv < tv and "d2t" not in tensors:
            r.errors.append("reduced-vocabulary DSpark must include d2t")
    elif dv != tv and "d2t" not in tensors:
        r.errors.append(f"draft_vocab_size {dv} != target vocab {tv}: draft_id_to_target_id is never filled (d2t "
                        "missing) [I]")
    if "lm_head.weight" in tensors:
        expected["lm_head.weight"] = (int(dv), int(config["hidden_size"]))
    if "d2t" in tensors and (dv != tv):
        expected["d2t"] = (int(dv),)
    if any(n.startswith("embed_tokens") for n in tensors):
        expected["embed_tokens.weight"] = (int(config["vocab_size"]), int(config["hidden_size"]))
    # compare in checkpoint names, then report vLLM's names in `mapped`
    _match(r, tensors, expected, lambda n: None if "t2d" in n else n.replace("midlayer.", "layers.0."),
           unknown="error")
    r.mapped = {k: _vllm_name(k) for k in r.mapped}
    r.ignored.extend(sorted(n for n in tensors if "t2d" in n))
    if r.missing:
        r.errors.append(f"parameters not filled by the checkpoint: {r.missing} [I: vLLM's loader raises]")
    return r


# ---------------------------------------------------------------------------------------------------------------
# llama.cpp's converter
# ---------------------------------------------------------------------------------------------------------------

def _gguf_layer_name(name):
    m = re.match(r"layers\.(\d+)\.(.*)$", name)
    if not m:
        return {"norm.weight": "output_norm.weight"}.get(name)
    table = {"input_layernorm.weight": "attn_norm.weight", "post_attention_layernorm.weight": "ffn_norm.weight",
             "self_attn.q_proj.weight": "attn_q.weight", "self_attn.k_proj.weight": "attn_k.weight",
             "self_attn.v_proj.weight": "attn_v.weight", "self_attn.o_proj.weight": "attn_output.weight",
             "self_attn.q_norm.weight": "attn_q_norm.weight", "self_attn.k_norm.weight": "attn_k_norm.weight",
             "mlp.gate_proj.weight": "ffn_gate.weight", "mlp.up_proj.weight": "ffn_up.weight",
             "mlp.down_proj.weight": "ffn_down.weight"}
    rest = table.get(m.group(2))
    return None if rest is None else f"blk.{m.group(1)}.{rest}"


def llama_cpp(folder, target=None):
    """llama.cpp as vendored in llama-cpp-python 0.3.36 (the build scripts/setup_llama_cpp.sh makes, which
    test_llama_cpp_engine.py runs on every row below): conversion/qwen.py DFlashModel / DSparkModel
    (--target-model-dir required; block_size from dflash_config, then the top level, default 16; target_layer_ids
    from dflash_config, then the top level, stored + 1; mask_token_id from dflash_config, DSpark's flat keys copied
    there when it has none; d2t/t2d dropped for DFlash; a markov_head_type other than vanilla raises), its loader
    src/models/dflash.cpp (conf_proj must be {hidden + markov_rank, 1}; a DFlash2 selector needs hidden_size >=
    top_k * (top_k + 1)) and common/speculative.cpp (no Markov tensors: draft-dflash, which reads slot j as the
    token at a + j; one causal flag, dflash.attention.causal, for every layer).
    `python convert_hf_to_gguf.py DRAFT --target-model-dir TARGET`."""
    config, tensors = read_folder(folder)
    arch = (config.get("architectures") or [""])[0]
    r = EngineRead("llama.cpp", None, "llama-cpp-python 0.3.36 vendor/llama.cpp: conversion/qwen.py, "
                                      "src/models/dflash.cpp, common/speculative.cpp (run by test_llama_cpp_engine.py)")
    families = {"DFlashDraftModel": "dflash", "Qwen3DSparkModel": "dspark", "DFlash2DraftModel": "dflash2"}
    if arch not in families:
        r.errors.append(f"architectures {arch!r}: the converter registers DFlashDraftModel, Qwen3DSparkModel and "
                        "DFlash2DraftModel [I for the last]")
        return r
    family = families[arch] if arch != "DFlashDraftModel" else _family_of(config)
    r.family = family
    s = r.settings
    s["family"] = family
    if target is None:
        r.errors.append("--target-model-dir: required (the target's config and tokenizer)")
        return r
    dc = _dc(config)
    n_layers = int(config["num_hidden_layers"])
    s["block_size"] = int(dc.get("block_size", config.get("block_size", 16)))
    if config.get("block_size") is not None and int(config["block_size"]) != s["block_size"]:
        r.silent.append(f"top-level block_size {config['block_size']} is not read: the GGUF says {s['block_size']}")
    ids = dc.get("target_layer_ids", config.get("target_layer_ids"))
    if ids is None:
        n_t = _num_target_layers(target)
        ids = [max(0, (i + 1) * n_t // (n_layers + 1) - 1) for i in range(n_layers)]
        r.silent.append(f"dflash_config.target_layer_ids absent: the converter spaces {ids} its own way")
    s["target_layer_ids"] = [int(i) for i in ids]
    s["capture_ids"] = [i + 1 for i in s["target_layer_ids"]]
    n_t = _num_target_layers(target)
    if n_t - 1 in s["target_layer_ids"]:
        r.silent.append(f"target_layer_ids {n_t - 1} is the target's last layer: the runtime takes that layer's "
                        "output before the final norm, not the final-normed hidden_states[-1] [I]")
    r.notes.append("dflash.target_layers: the converter stores ids + 1, the layer inputs llama.cpp extracts")
    mask = dc.get("mask_token_id") if family != "dspark" else dc.get("mask_token_id", config.get("mask_token_id"))
    s["mask_token_id"] = None if mask is None else int(mask)
    if mask is None:
        r.silent.append("mask_token_id: not written (read from dflash_config only)")
    s["head"], s["d2t"], s["draft_vocab_size"] = "target", False, None
    s["num_draft_tokens"] = s["block_size"] if family == "dspark" else s["block_size"] - 1
    th = config.get("target_hidden_size") or _text(target)["hidden_size"]
    expected = {k: v for k, v in backbone_params(config, len(s["target_layer_ids"]), th).items()}
    gguf = {k: ("fc.weight" if k == "fc.weight" else "dflash.hidden_norm.weight" if k == "hidden_norm.weight"
                else _gguf_layer_name(k)) for k in expected}
    if family == "dspark":
        head = str(config.get("markov_head_type", "vanilla")).lower()
        s["markov_rank"] = int(config.get("markov_rank", 0) or 0)
        s["markov_head_type"] = head
        s["confidence_head"] = bool(config.get("enable_confidence_head", False))
        if head != "vanilla":
            r.errors.append(f"markov_head_type {head!r}: the converter raises (only 'vanilla' is supported)")
        if s["markov_rank"] == 0:
            r.silent.append("markov_rank 0: no markov_w1/w2, so llama.cpp runs it as draft-dflash, reading slot j as "
                            "the token at a + j, not a + j + 1")
        elif s["confidence_head"] and not bool(config.get("confidence_head_with_markov", True)):
            r.errors.append("confidence_head_with_markov false: the loader wants conf_proj {hidden + markov_rank, 1} "
                            "and fails on the shape")
        conf = s["confidence_head"] or any(n.startswith("confidence_head.") for n in tensors)  # mapped when present
        heads = dspark_params(config, "vanilla", s["markov_rank"], conf,
                              bool(config.get("confidence_head_with_markov", True)))
        expected.update(heads)
        gguf.update({"markov_head.markov_w1.weight": "markov_w1.weight", "markov_head.markov_w2.weight":
                     "markov_w2.weight", "confidence_head.proj.weight": "conf_proj.weight",
                     "confidence_head.proj.bias": "conf_proj.bias"})
    if family == "dflash2":
        for key in ("conv_kernel_size", "conv_group_size", "selector_rank", "selector_top_k"):
            s[key] = None if dc.get(key) is None else int(dc[key])
        if None in (s["conv_kernel_size"], s["conv_group_size"], s["selector_rank"]):
            r.errors.append("dflash_config conv/selector fields: required for a DFlash2 GGUF")
            return r
        top_k, hidden = s["selector_top_k"] or 0, int(config["hidden_size"])
        if hidden < top_k * (top_k + 1):
            r.errors.append(f"selector_top_k {top_k} at hidden_size {hidden}: the loader throws (the selector lattice "
                            "of a slot, top_k * (top_k + 1) values, lives in a hidden-size row)")
        extra = dflash2_params(config, s["conv_kernel_size"], s["conv_group_size"], s["selector_rank"])
        expected.update(extra)
        gguf.update({k: k for k in extra})   # GGUF names of the DFlash2 tensors not read [I]
        r.notes.append("llama.cpp drafts DFlash2 greedily only (#27342)")
    if "sliding_attention" in _layer_types(config):
        r.silent.append("sliding_attention layers: one causal flag (is_causal; absent: non-causal) for every layer, "
                        "so they attend both ways inside the block, where they were trained causal")
    for name in sorted(tensors):
        if name in ("d2t", "t2d"):
            r.ignored.append(name)
        elif name.startswith("embed_tokens") or (name == "lm_head.weight" and family == "dspark"):
            r.ignored.append(name)
        elif name == "lm_head.weight" and _has_draft_vocab(config, tensors):
            r.errors.append("lm_head.weight: a drafter GGUF shares the target's vocabulary; a draft-vocabulary head "
                            "does not fit it (d2t is dropped) [I]")
        elif name == "lm_head.weight":
            r.mapped[name] = "output.weight"   # Qwen3's mapping; the runtime uses the target's head [I]
    tensors = {k: v for k, v in tensors.items() if k not in r.ignored and k != "lm_head.weight"}
    _match(r, tensors, expected, unknown="error", shape_errors=False)
    r.mapped = {k: gguf.get(v, v) for k, v in r.mapped.items()}
    if r.missing:
        r.errors.append(f"tensors the GGUF needs and the folder lacks: {r.missing} [I]")
    return r


# ---------------------------------------------------------------------------------------------------------------
# vllm-project/speculators converter
# ---------------------------------------------------------------------------------------------------------------

def speculators(folder, target=None):
    """vllm-project/speculators src/speculators/convert/dflash/converter.py + convert/entrypoints.py @c05b95b3
    (DFlashConverter): a folder with dflash_config or a DFlash architecture converts as DFlash, anything else is not
    a supported format. block_size: the TOP LEVEL first, then dflash_config; target_layer_ids and mask_token_id
    from dflash_config; aux_hidden_state_layer_ids = ids + 1 with the verifier's last layer silently left out;
    embed/lm_head come from the verifier; unexpected keys and missing body weights raise; load_state_dict raises on
    a shape mismatch. Reached through convert_model(DRAFT, verifier=TARGET, algorithm="dflash") or the automatic
    conversion when a DFlash folder is loaded for fine-tuning (the CLI offers eagle, eagle3 and mtp only)."""
    config, tensors = read_folder(folder)
    arch = (config.get("architectures") or [""])[0]
    r = EngineRead("speculators", None, "vllm-project/speculators convert/dflash/converter.py, convert/entrypoints.py"
                                        " @c05b95b3")
    if not (config.get("dflash_config") is not None or any("DFlash" in a for a in config.get("architectures") or [])):
        r.errors.append(f"architectures {arch!r} without dflash_config: not a supported external format (the "
                        "converter auto-converts DFlash only)")
        return r
    r.family = "dflash"
    s = r.settings
    s["family"] = "dflash"
    if target is None:
        r.errors.append("the verifier (base model) is required")
        return r
    dc = _dc(config)
    block = config.get("block_size") or dc.get("block_size")
    if block is None:
        r.errors.append("block_size: neither top-level nor in dflash_config")
        return r
    s["block_size"] = int(block)
    s["num_draft_tokens"] = int(block) - 1
    if config.get("block_size") and dc.get("block_size") and int(config["block_size"]) != int(dc["block_size"]):
        r.silent.append("block_size differs between the top level and dflash_config: the converter takes the top "
                        "level")
    if config.get("hidden_size") != _text(target).get("hidden_size"):
        r.errors.append("hidden_size differs from the verifier's")
    ids = dc.get("target_layer_ids")
    if ids is None:
        r.errors.append("dflash_config.target_layer_ids: required unless aux ids are passed")
        return r
    nv = _num_target_layers(target)
    aux = [i + 1 for i in ids if i + 1 != nv]
    s["capture_ids"] = aux
    s["target_layer_ids"] = [i - 1 for i in aux]
    if len(aux) != len(ids):
        r.silent.append(f"target_layer_ids {nv - 1} (the verifier's last layer) is dropped from the aux ids")
    s["mask_token_id"] = dc.get("mask_token_id")
    s["head"], s["d2t"], s["draft_vocab_size"] = "target", False, int(config["vocab_size"])
    expected = backbone_params(config, len(aux))
    if _family_of(config) == "dflash2":
        r.notes.append("a DFlash2 folder converts as DFlash: its conv/selector tensors are unexpected keys")
    for name in ("t2d", "d2t"):
        if name in tensors:
            r.ignored.append(name)
    V, d = int(config["vocab_size"]), int(config["hidden_size"])
    fill = {"embed_tokens.weight": (V, d), "lm_head.weight": (V, d)}   # overwritten from the verifier
    body = {k: v for k, v in tensors.items() if k not in ("t2d", "d2t")}
    _match(r, body, {**expected, **fill}, unknown="error")
    r.missing = [m for m in r.missing if m not in fill]
    for name in ("embed_tokens.weight", "lm_head.weight"):
        if name in r.mapped:
            r.notes.append(f"{name}: replaced by the verifier's at save time")
    if r.missing:
        r.errors.append(f"draft weights missing after load: {r.missing}")
    return r


# ---------------------------------------------------------------------------------------------------------------
# SpecForge
# ---------------------------------------------------------------------------------------------------------------

def specforge(folder, target=None):
    """sgl-project/SpecForge specforge/modeling/draft/dflash.py + dspark.py @a6b6b023 (DFlashDraftModel,
    DSparkDraftModel; HF from_pretrained: unexpected keys and fresh parameters are warnings) and the DFlash2 draft
    class of a later specforge (selector fields from dflash_config, ints) [read in the index, commit unknown].
    block_size from the top level only; target_layer_ids, mask_token_id and every DSpark field from dflash_config
    only (a DeepSpec-flat export therefore loads with no Markov head)."""
    config, tensors = read_folder(folder)
    arch = (config.get("architectures") or [""])[0]
    r = EngineRead("specforge", None, "sgl-project/SpecForge modeling/draft/dflash.py, dspark.py @a6b6b023")
    fam = {"DFlashDraftModel": "dflash", "DSparkDraftModel": "dspark", "Qwen3DSparkModel": "dspark",
           "DFlash2DraftModel": "dflash2"}.get(arch)
    if fam is None:
        r.errors.append(f"architectures {arch!r}: not a SpecForge draft class")
        return r
    r.family = fam
    s = r.settings
    s["family"] = fam
    dc = _dc(config)
    if config.get("block_size") is None:
        r.errors.append("block_size: read from the top level (config.block_size)")
        return r
    s["block_size"] = int(config["block_size"])
    if dc.get("block_size") is not None and int(dc["block_size"]) != s["block_size"]:
        r.silent.append("dflash_config.block_size is not read")
    n_layers = int(config["num_hidden_layers"])
    ids = dc.get("target_layer_ids")
    if ids is None:
        ntl = config.get("num_target_layers")
        if ntl is None:
            r.errors.append("neither dflash_config.target_layer_ids nor num_target_layers")
            return r
        ids = _spaced_layer_ids(int(ntl), n_layers)
        r.silent.append(f"dflash_config.target_layer_ids absent: SpecForge uses {ids}")
    s["target_layer_ids"] = [int(i) for i in ids]
    s["capture_ids"] = [i + 1 for i in s["target_layer_ids"]]
    s["mask_token_id"] = dc.get("mask_token_id")
    if s["mask_token_id"] is None:
        r.silent.append("mask_token_id: read from dflash_config only (None)")
    s["head"], s["d2t"], s["draft_vocab_size"] = "target", False, None
    s["num_draft_tokens"] = s["block_size"] - 1   # spec_generate drafts slots 1..B-1, DSpark included
    expected = backbone_params(config, len(ids))
    if fam == "dspark":
        rank = int(dc.get("markov_rank", 0) or 0)
        head = str(dc.get("markov_head_type", "vanilla")).lower()
        conf = bool(dc.get("enable_confidence_head", float(dc.get("confidence_head_alpha", 0.0) or 0.0) > 0))
        with_markov = bool(dc.get("confidence_head_with_markov", False))
        s.update(markov_rank=rank, markov_head_type=head, confidence_head=conf, confidence_head_with_markov=with_markov)
        if rank == 0 and config.get("markov_rank"):
            r.silent.append("markov_rank is top-level only: SpecForge reads dflash_config and builds no Markov head")
        hq, hkv = int(config["num_attention_heads"]), int(config["num_key_value_heads"])
        mode = str(dc.get("attention_mode", "gqa")).lower()
        if (mode == "gqa" and hkv >= hq) or (mode == "mha" and hkv != hq):
            r.errors.append(f"attention_mode {mode}: num_key_value_heads {hkv} vs num_attention_heads {hq}")
        if rank:
            expected.update(dspark_params(config, head, rank, conf, with_markov))
        elif conf:
            expected.update({"confidence_head.proj.weight": (1, int(config["hidden_size"])),
                             "confidence_head.proj.bias": (1,)})
    if fam == "dflash2":
        for key in ("selector_rank", "selector_top_k", "conv_kernel_size", "conv_group_size"):
            v = dc.get(key)
            if not isinstance(v, int) or isinstance(v, bool):
                r.errors.append(f"dflash_config.{key}: an int is required")
            s[key] = v
        if r.errors:
            return r
        expected.update(dflash2_params(config, s["conv_kernel_size"], s["conv_group_size"], s["selector_rank"]))
        r.notes.append("conv tensor names of SpecForge's DFlash2 class as z-lab's contract [I]")
    _match(r, tensors, expected, unknown="reported")
    if r.missing:
        r.reported.extend(f"{m} (newly initialised)" for m in r.missing)
    if _has_draft_vocab(config, tensors):
        r.silent.append("draft vocabulary: SpecForge's draft classes have no lm_head/d2t (unexpected keys)")
    return r


def deepspec(folder, target=None):
    """deepseek-ai/DeepSpec deepspec/modeling/dspark/qwen3/modeling.py @5905deb7 (Qwen3DSparkModel.__init__, loaded
    with HF from_pretrained: missing parameters and unexpected keys are warnings). Every setting is a top-level
    config attribute: target_layer_ids, mask_token_id, num_anchors, enable_confidence_head and markov_rank are each
    asserted present, markov_head_type when markov_rank > 0, confidence_head_with_markov when the confidence head is
    on; block_size is int(config.block_size). It builds embed_tokens and lm_head as parameters, which
    initialize_embeddings_and_head then copies from the target (frozen), so an export without them misses only
    those two."""
    config, tensors = read_folder(folder)
    arch = (config.get("architectures") or [""])[0]
    r = EngineRead("deepspec", None, "deepseek-ai/DeepSpec deepspec/modeling/dspark/qwen3/modeling.py @5905deb7")
    if arch != "Qwen3DSparkModel":
        r.errors.append(f"architectures {arch!r}: DeepSpec's DSpark class is Qwen3DSparkModel")
        return r
    for key in ("target_layer_ids", "mask_token_id", "num_anchors", "enable_confidence_head", "markov_rank"):
        if key not in config:
            r.errors.append(f"config.{key} must be provided (an assertion in Qwen3DSparkModel.__init__)")
    if r.errors:
        return r
    r.family = "dspark"
    s = r.settings
    rank, conf = int(config["markov_rank"]), bool(config["enable_confidence_head"])
    if rank > 0 and "markov_head_type" not in config:
        r.errors.append("config.markov_head_type must be provided when markov_rank > 0")
    if conf and "confidence_head_with_markov" not in config:
        r.errors.append("config.confidence_head_with_markov must be provided when enable_confidence_head is true")
    if "block_size" not in config:
        r.errors.append("config.block_size: read as int(config.block_size)")
    if r.errors:
        return r
    head = str(config.get("markov_head_type", "vanilla")).lower()
    with_markov = conf and bool(config["confidence_head_with_markov"])
    s.update(family="dspark", block_size=int(config["block_size"]), num_draft_tokens=int(config["block_size"]),
             target_layer_ids=[int(i) for i in config["target_layer_ids"]], mask_token_id=config["mask_token_id"],
             num_anchors=int(config["num_anchors"]), markov_rank=rank, markov_head_type=head, confidence_head=conf,
             confidence_head_with_markov=with_markov, head="target", d2t=False, draft_vocab_size=None)
    expected = backbone_params(config, len(s["target_layer_ids"]))
    d, V = int(config["hidden_size"]), int(config["vocab_size"])
    expected.update({"embed_tokens.weight": (V, d), "lm_head.weight": (V, d)})
    if rank > 0:
        expected.update(dspark_params(config, head, rank, conf, with_markov))
    elif conf:
        expected.update({"confidence_head.proj.weight": (1, d), "confidence_head.proj.bias": (1,)})
    _match(r, tensors, expected, unknown="reported")
    frozen = [m for m in r.missing if m in ("embed_tokens.weight", "lm_head.weight")]
    if frozen:
        r.notes.append(f"{', '.join(frozen)}: copied from the target by initialize_embeddings_and_head (frozen)")
    r.reported.extend(f"{m} (newly initialised)" for m in r.missing if m not in frozen)
    return r


READERS = {"sglang": sglang, "vllm": vllm, "llama.cpp": llama_cpp, "zlab": zlab, "speculators": speculators,
           "specforge": specforge, "deepspec": deepspec}


def read(engine, folder, target=None, **serve):
    """The engine's reading of an export folder; target = the target's config.json as a dict (needed by llama.cpp
    and speculators, used for layer-range checks elsewhere); serve = engine-specific serving options
    (sglang: num_draft_tokens; vllm: num_speculative_tokens, v2_runner)."""
    if engine not in READERS:
        raise ValueError(f"engine: expected one of {', '.join(ENGINES)}, got {engine!r}")
    return READERS[engine](folder, target=target, **serve)


def read_all(folder, target=None):
    return {e: read(e, folder, target) for e in ENGINES}


# ---------------------------------------------------------------------------------------------------------------
# z-lab DFlash2DraftModel, run: its load and one block's forward in float64 (docs/DFLASH2.md)
# ---------------------------------------------------------------------------------------------------------------

def zlab_dflash2_load(folder):
    """DFlash2DraftModel.from_pretrained(folder) as z-lab builds it: the parameters of zlab()'s reading (backbone,
    convs, selector with nn.Embedding codebooks) filled through key_mapping (a bare codebook name -> its .weight).
    Returns (config, {z-lab parameter name: float64 tensor}); raises when a parameter is missing or a tensor has no
    parameter (from_pretrained would leave the first at its init and warn about the second)."""
    from safetensors.torch import load_file
    r = zlab(folder)
    if not r.loads or r.family != "dflash2":
        raise ValueError(f"z-lab does not load {folder} as DFlash2: {r.errors or r.family}")
    if r.missing or r.reported:
        raise ValueError(f"z-lab load of {folder}: missing {r.missing}, unexpected {r.reported}")
    config, _ = read_folder(folder)
    tensors = load_file(str(pathlib.Path(folder) / "model.safetensors"))
    return config, {r.mapped[n]: t.double() for n, t in tensors.items() if n in r.mapped}


def _rms(x, w, eps):
    return x * (x.pow(2).mean(-1, keepdim=True) + eps).rsqrt() * w


def _rotary(x, pos, theta):
    """Rotate-half RoPE on x [T, heads, hd] at integer positions pos [T]."""
    import torch
    hd = x.shape[-1]
    inv = theta ** (-torch.arange(0, hd, 2, dtype=torch.float64) / hd)
    ang = pos.double()[:, None] * inv[None]
    cos, sin = torch.cat([ang.cos(), ang.cos()], -1)[:, None], torch.cat([ang.sin(), ang.sin()], -1)[:, None]
    half = hd // 2
    return x * cos + torch.cat([-x[..., half:], x[..., :half]], -1) * sin


def _block_conv(v, base, delta, group):
    """One block alone (z-lab: one block per call): taps before the block's first token read zeros."""
    import torch
    out = torch.zeros_like(v)
    for t in range(v.shape[0]):
        for o in range(min(base.shape[0], t + 1)):
            out[t] += (base[o] + delta[t, o].repeat_interleave(group)) * v[t - o]
    return out


def zlab_dflash2_block(config, W, embed, lm_head, features, anchor_token, anchor_pos):
    """One draft block as z-lab's DFlash2DraftModel runs it: features [a, n*H] (the target's hidden_states[id + 1]
    of the tokens before the anchor), block [anchor_token, MASK x (B-1)] at positions a..a+B-1, bidirectional
    (is_causal false), every layer pre-norm with its sublayers wrapped in the block convs, the final norm, then the
    target's LM head with output_multiplier and the soft cap. Full-attention layers only. Returns (hidden [B, d],
    unary logits [B, V])."""
    import torch
    dc = _dc(config)
    B, eps, theta = int(dc["block_size"]), float(config["rms_norm_eps"]), float(config.get("rope_theta", 10000.0))
    hq, hkv = int(config["num_attention_heads"]), int(config["num_key_value_heads"])
    hd = int(config.get("head_dim") or int(config["hidden_size"]) // hq)
    K, G = int(dc["conv_kernel_size"]), int(dc["conv_group_size"])
    if any(t != "full_attention" for t in _layer_types(config)):
        raise ValueError("zlab_dflash2_block: full_attention layers only")
    a = features.shape[0]
    ctx = _rms(features @ W["fc.weight"].T, W["hidden_norm.weight"], eps)
    x = embed[torch.tensor([anchor_token] + [int(dc["mask_token_id"])] * (B - 1))]
    qpos = torch.arange(anchor_pos, anchor_pos + B)
    kpos = torch.cat([torch.arange(a), qpos])

    def wrapped(u, sublayer, prefix):
        delta = (u @ W[prefix + "kernel_projection.weight"].T).reshape(B, 2, K, -1)
        base = W[prefix + "base_kernel"]
        return _block_conv(sublayer(_block_conv(u, base[0], delta[:, 0], G)), base[1], delta[:, 1], G)

    for i in range(int(config["num_hidden_layers"])):
        L = lambda n: W[f"layers.{i}.{n}"]  # noqa: E731

        def attention(u):
            kv = torch.cat([ctx, u])
            q = _rotary(_rms((u @ L("self_attn.q_proj.weight").T).view(B, hq, hd), L("self_attn.q_norm.weight"),
                             eps), qpos, theta)
            k = _rotary(_rms((kv @ L("self_attn.k_proj.weight").T).view(-1, hkv, hd), L("self_attn.k_norm.weight"),
                             eps), kpos, theta)
            v = (kv @ L("self_attn.v_proj.weight").T).view(-1, hkv, hd)
            k, v = k.repeat_interleave(hq // hkv, 1), v.repeat_interleave(hq // hkv, 1)
            p = torch.softmax(torch.einsum("qhd,khd->hqk", q, k) * hd ** -0.5, -1)
            return torch.einsum("hqk,khd->qhd", p, v).reshape(B, hq * hd) @ L("self_attn.o_proj.weight").T

        def mlp(u):
            g = u @ L("mlp.gate_proj.weight").T
            return (g * torch.sigmoid(g) * (u @ L("mlp.up_proj.weight").T)) @ L("mlp.down_proj.weight").T

        x = x + wrapped(_rms(x, L("input_layernorm.weight"), eps), attention, f"layers.{i}.attention_conv.")
        x = x + wrapped(_rms(x, L("post_attention_layernorm.weight"), eps), mlp, f"layers.{i}.mlp_conv.")
    h = _rms(x, W["norm.weight"], eps)
    u = (h @ lm_head.T) * float(dc.get("output_multiplier", 1.0))
    cap = float(dc.get("final_logit_softcapping") or 0.0)
    return h, (torch.tanh(u / cap) * cap if cap > 0 else u)


def zlab_dflash2_greedy_walk(config, W, hidden, unary, anchor_token):
    """The selector's greedy walk over slots 1..B-1 (docs/DFLASH2.md): candidates topK(U_k), scores
    S_k(p, c) = U_k[c] + <A[p] * (W_h h_k), Bc[c]>, p_1 = the anchor, then p_{k+1} = argmax. Returns (path [B-1],
    scores [B-1, K] along the path)."""
    import torch
    top_k = int(_dc(config)["selector_top_k"])
    A = W["candidate_selector.predecessor_codebook.weight"]
    Bc = W["candidate_selector.successor_codebook.weight"]
    Wh = W["candidate_selector.hidden_projection.weight"]
    p, path, scores = int(anchor_token), [], []
    for k in range(1, unary.shape[0]):
        cand = torch.sort(-unary[k], stable=True).indices[:top_k]
        s = unary[k, cand] + Bc[cand] @ (A[p] * (Wh @ hidden[k]))
        p = int(cand[s.argmax()])
        path.append(p)
        scores.append(s)
    return torch.tensor(path), torch.stack(scores)
