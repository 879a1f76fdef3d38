"""Tiny random Hugging Face targets shared by the Python tests (the C++ twin: tests/models/tiny_target.h)."""
import torch
from transformers import LlamaConfig, LlamaForCausalLM


def tiny_llama(directory=None, *, vocab=256, hidden=32, layers=2, seed=0, weight_scale=1.0, max_positions=512,
               **config):
    """A tied Llama (4 query heads over 2 KV heads, MLP 64, bos 1, eos 2) in fp32, eval mode. Every non-norm weight is
    redrawn N(0, weight_scale^2 / fan_in): larger than the default init, so differences between implementations are
    not hidden by tiny activations (weight_scale=None keeps transformers' init). Saved to `directory` when given;
    `config` overrides LlamaConfig fields."""
    torch.manual_seed(seed)
    fields = dict(vocab_size=vocab, hidden_size=hidden, intermediate_size=64, num_hidden_layers=layers,
                  num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=True,
                  max_position_embeddings=max_positions, bos_token_id=1, eos_token_id=2)
    fields.update(config)
    model = LlamaForCausalLM(LlamaConfig(**fields)).float().eval()
    if weight_scale is not None:
        with torch.no_grad():
            for name, p in model.named_parameters():
                if "norm" not in name:
                    p.normal_(0, weight_scale / p.shape[-1] ** 0.5)
    if directory is not None:
        model.save_pretrained(str(directory))
    return model
