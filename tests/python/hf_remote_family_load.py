"""Loads a DSpark or DFlash2 export with AutoModel(trust_remote_code=True) in float64 and writes what it drafts.

    python hf_remote_family_load.py DRAFTER_DIR BATCH.safetensors OUT.safetensors

BATCH: target_features [1, S, n*H], input_ids [1, S], anchors [1, N], embed [V, H], lm_head [V, H], and for DSpark
prev [N, B] (each slot's teacher-forced previous token). Prints hf_remote_load's JSON report and writes:
  both:    hidden [N, B, H] (block_hidden), unary [N, B, V] (hidden through lm_head), drafts (model.draft)
  DSpark:  logits [N, B, V], confidence [N, B] (block_logits with prev), draft_logits, draft_confidence
  DFlash2: path [N, B-1], scores [N, B-1, K] (the selector's walk over slots 1..B-1)
Run in a subprocess with HF_MODULES_CACHE set to a temporary folder (hf_remote_load.py says why).
"""
import json
import sys

import torch
from safetensors.torch import load_file, save_file

from hf_remote_load import load


def main():
    folder, batch_path, out_path = sys.argv[1:4]
    model, report = load(folder)
    b = load_file(batch_path)
    anchors = b["anchors"]
    first = b["input_ids"].gather(1, anchors)
    feats, embed, lm_head = (b[k].to(torch.float64) for k in ("target_features", "embed", "lm_head"))
    out = {}
    with torch.no_grad():
        hidden = model.block_hidden(feats, first, anchors, embed)[0]
        out["hidden"], out["unary"] = hidden, hidden @ lm_head.T
        draft = model.draft(feats, first, anchors, embed, lm_head)
        if report["class"] == "Qwen3DSparkModel":
            out["logits"], conf = model.block_logits(hidden, b["prev"], lm_head)
            out["drafts"], out["draft_logits"] = draft.tokens[0], draft.logits[0]
            if conf is not None:
                out["confidence"], out["draft_confidence"] = conf, draft.confidence[0]
        else:
            out["drafts"] = draft[0]
            out["path"], _, out["scores"] = model.candidate_selector.walk(hidden[:, 1:], out["unary"][:, 1:], first[0])
    save_file({k: v.contiguous() for k, v in out.items()}, out_path)
    print(json.dumps(report))


if __name__ == "__main__":
    main()
