"""Loads a drafter folder the way users load released DFlash drafters, and runs it on a test batch.

    python hf_remote_load.py DRAFTER_DIR BATCH.safetensors OUT.safetensors

AutoModel.from_pretrained(DRAFTER_DIR, trust_remote_code=True) in float64; prints one JSON line (class
name, missing / unexpected / mismatched keys, tensors that differ from model.safetensors) and writes the
drafter's logits for the batch's blocks and its greedy drafts. Run in a subprocess with HF_MODULES_CACHE set
to a temporary folder: transformers copies the remote code there and imports it.
"""
import json
import sys

import torch
from safetensors.torch import load_file, save_file
from transformers import AutoModel


def load(folder):
    """(the model in float64, the load report)."""
    model, info = AutoModel.from_pretrained(folder, trust_remote_code=True, dtype=torch.float64,
                                            output_loading_info=True)
    model.eval()
    stored = load_file(f"{folder}/model.safetensors")
    state = model.state_dict()
    differ = [k for k, t in stored.items() if k not in state or not torch.equal(state[k], t.to(torch.float64))]
    return model, {"class": type(model).__name__, "missing": sorted(info["missing_keys"]),
                   "unexpected": sorted(info["unexpected_keys"]),
                   "mismatched": [str(m) for m in info.get("mismatched_keys", [])], "differ": differ,
                   "params": sorted(state), "dtype": str(next(model.parameters()).dtype)}


def main():
    folder, batch_path, out_path = sys.argv[1:4]
    model, report = load(folder)
    b = load_file(batch_path)
    B = model.block_size
    anchors, keep = b["anchors"], b["keep"].bool()
    embed = b["embed"].to(torch.float64)
    lm_head = b["lm_head"].to(torch.float64) if "lm_head" in b else embed
    block_ids = torch.full((anchors.size(0), anchors.size(1) * B), model.mask_token_id, dtype=torch.long)
    first = b["input_ids"].gather(1, anchors.clamp(max=b["input_ids"].size(1) - 1))
    block_ids.view(anchors.size(0), -1, B)[:, :, 0] = first
    feats = b["target_features"].to(torch.float64)
    with torch.no_grad():
        hidden = model(torch.nn.functional.embedding(block_ids, embed), feats, anchors, keep).last_hidden_state
    drafts = model.draft(feats, first, anchors, embed, lm_head, keep)
    save_file({"logits": (hidden @ lm_head.T).contiguous(), "drafts": drafts.contiguous(),
               "block_ids": block_ids}, out_path)
    print(json.dumps(report))


if __name__ == "__main__":
    main()
