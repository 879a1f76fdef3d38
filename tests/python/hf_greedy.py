"""Greedy decoding with a Hugging Face model by full forwards (no cache): the reference the data and
eval tests compare our target's replies against."""
import torch


def hf_greedy(model, prompt, max_new, eos=2):
    ids = torch.tensor([prompt])
    out = []
    with torch.no_grad():
        for _ in range(max_new):
            t = int(model(ids).logits[0, -1].argmax())
            out.append(t)
            if t == eos:
                break
            ids = torch.cat([ids, torch.tensor([[t]])], 1)
    return out
