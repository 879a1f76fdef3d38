// A loaded tokenizer written back as HF files (tokenizer.json + tokenizer_config.json) that HF `tokenizers` and
// transformers read as the same tokenizer: llama.cpp's converter needs them for a drafter of a GGUF target
// (`dflash target hf-folder`, docs/SERVING.md).
#pragma once
#include <string>

#include "tokenizer.h"

namespace dflash::tok {

// tokenizer.json's text: the BPE vocabulary and merges, added tokens, the pre-tokenizer steps, the ByteLevel decoder.
std::string tokenizer_json_text(const Tokenizer& t);
// tokenizer_config.json's text: the special tokens by content, the chat template, `max_length` as model_max_length.
std::string tokenizer_config_json_text(const Tokenizer& t, int64_t max_length);

}  // namespace dflash::tok
