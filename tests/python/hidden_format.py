"""The `dflash-hidden-v1` format from Python, for every Python test that writes or reads it (the C++ side is
src/data/hidden_shards.h and hidden_shard_writer.h): one shard writer, and a reader of a folder through the union
of its index-<part>.json files (the one index layout), samples keyed as the writer keyed them."""
import json
import pathlib

import torch
from safetensors.torch import load_file, save_file

FORMAT = "dflash-hidden-v1"


def write_shard(path, samples, target_layer_ids, hidden_size, **metadata):
    """samples: dicts of input_ids [S], loss_mask [S], hidden_states [S, n*H] and optionally last_hidden [S, H]."""
    t = {}
    for i, s in enumerate(samples):
        t[f"{i}.input_ids"] = s["input_ids"].long().contiguous()
        t[f"{i}.loss_mask"] = s["loss_mask"].to(torch.uint8).contiguous()
        t[f"{i}.hidden_states"] = s["hidden_states"].contiguous()
        if s.get("last_hidden") is not None:
            t[f"{i}.last_hidden"] = s["last_hidden"].contiguous()
    meta = {"format": FORMAT, "target_layer_ids": ",".join(map(str, target_layer_ids)), "hidden_size": str(hidden_size)}
    meta.update({k: str(v) for k, v in metadata.items()})
    save_file(t, str(path), metadata=meta)


def indices(folder):
    """{part: index JSON} of a folder's index-<part>.json files."""
    return {p.name[len("index-"):-len(".json")]: json.loads(p.read_text())
            for p in sorted(pathlib.Path(folder).glob("index-*.json"))}


def read_folder(folder):
    """{key: (input_ids, loss_mask, hidden_states, last_hidden or None)} over every index-*.json; a key stored
    twice is an error (the writers never duplicate a sample)."""
    out = {}
    for part, idx in indices(folder).items():
        assert idx["format"] == FORMAT, part
        for shard in idx["shards"]:
            t = load_file(str(pathlib.Path(folder) / shard["file"]))
            assert len(shard["keys"]) == shard["samples"]
            for i, key in enumerate(shard["keys"]):
                assert key not in out, f"{part}: sample {key} stored twice"
                out[key] = (t[f"{i}.input_ids"], t[f"{i}.loss_mask"], t[f"{i}.hidden_states"], t.get(f"{i}.last_hidden"))
    return out
