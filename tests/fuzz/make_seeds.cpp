// Writes the seed corpus of every fuzz target: small valid inputs of each format (and a few near misses), made
// with the project's own writers where there is one. Run by ctest (test fuzz_seeds) before the fuzzers.
// usage: make_fuzz_seeds OUT_DIR
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "pretokenizer.h"
#include "safetensors_header.h"
#include "unicode.h"

namespace fs = std::filesystem;
using dflash::io::SafetensorsEntry;

namespace {

fs::path g_out;

void seed(const std::string& target, const std::string& name, const std::string& bytes) {
  const fs::path d = g_out / target;
  fs::create_directories(d);
  std::ofstream(d / name, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

std::string safetensors_file(const std::vector<SafetensorsEntry>& entries, const std::map<std::string, std::string>& meta,
                             size_t data_bytes) {
  const std::string header = dflash::io::build_safetensors_header(entries, meta);
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((header.size() >> (8 * i)) & 0xff);
  out += header;
  for (size_t i = 0; i < data_bytes; ++i) out.push_back(static_cast<char>(i * 37));
  return out;
}

void safetensors_seeds() {
  seed("safetensors", "one_f32", safetensors_file({{"w", "F32", {2, 2}, 0, 16}}, {}, 16));
  seed("safetensors", "all_dtypes",
       safetensors_file({{"a", "F64", {1}, 0, 8}, {"b", "F16", {2}, 8, 12}, {"c", "BF16", {2}, 12, 16},
                         {"d", "I64", {1}, 16, 24}, {"e", "I32", {1}, 24, 28}, {"f", "I16", {2}, 28, 32},
                         {"g", "I8", {2}, 32, 34}, {"h", "U8", {1}, 34, 35}, {"i", "BOOL", {1}, 35, 36},
                         {"empty", "F32", {0, 3}, 36, 36}, {"scalar", "F32", {}, 36, 40}},
                        {{"format", "pt"}}, 40));
  seed("safetensors", "hidden_shard",
       safetensors_file({{"0.input_ids", "I64", {3}, 0, 24}, {"0.loss_mask", "U8", {3}, 24, 27},
                         {"0.hidden_states", "BF16", {3, 4}, 27, 51}},
                        {{"format", "dflash-hidden-v1"}, {"target_layer_ids", "1,2"}, {"hidden_size", "2"}}, 51));
  seed("safetensors", "no_tensors", safetensors_file({}, {{"k", "v"}}, 0));
}

void put_u32(std::string& s, uint32_t v) { s.append(reinterpret_cast<const char*>(&v), 4); }
void put_u64(std::string& s, uint64_t v) { s.append(reinterpret_cast<const char*>(&v), 8); }
void put_str(std::string& s, const std::string& v) {
  put_u64(s, v.size());
  s += v;
}
void kv_str(std::string& s, const std::string& k, const std::string& v) {
  put_str(s, k);
  put_u32(s, 8);
  put_str(s, v);
}
void kv_u32(std::string& s, const std::string& k, uint32_t v) {
  put_str(s, k);
  put_u32(s, 4);
  put_u32(s, v);
}

void gguf_seeds() {
  // A tiny llama with a byte-level vocabulary: every byte, a few merges, two special tokens, one tensor of each
  // common type.
  std::vector<std::string> tokens;
  for (int b = 0; b < 256; ++b) tokens.push_back(dflash::tok::bytes_to_alphabet(std::string(1, char(b))));
  const std::vector<std::string> merges = {"h e", "l l", "he ll", "Ġ w"};
  for (const auto& m : merges) tokens.push_back(m.substr(0, m.find(' ')) + m.substr(m.find(' ') + 1));
  tokens.push_back("<|im_start|>");
  tokens.push_back("<|im_end|>");
  std::string s = "GGUF";
  put_u32(s, 3);
  put_u64(s, 3);   // tensors
  put_u64(s, 13);  // kvs
  kv_str(s, "general.architecture", "llama");
  kv_u32(s, "general.alignment", 32);
  kv_u32(s, "llama.block_count", 1);
  kv_u32(s, "llama.embedding_length", 32);
  kv_str(s, "tokenizer.ggml.model", "gpt2");
  kv_str(s, "tokenizer.ggml.pre", "smollm");
  put_str(s, "tokenizer.ggml.tokens");
  put_u32(s, 9);
  put_u32(s, 8);
  put_u64(s, tokens.size());
  for (const auto& t : tokens) put_str(s, t);
  put_str(s, "tokenizer.ggml.merges");
  put_u32(s, 9);
  put_u32(s, 8);
  put_u64(s, merges.size());
  for (const auto& m : merges) put_str(s, m);
  put_str(s, "tokenizer.ggml.token_type");
  put_u32(s, 9);
  put_u32(s, 5);  // INT32
  put_u64(s, tokens.size());
  for (size_t i = 0; i < tokens.size(); ++i) put_u32(s, i + 2 >= tokens.size() ? 3 : 1);
  kv_u32(s, "tokenizer.ggml.bos_token_id", uint32_t(tokens.size() - 2));
  kv_u32(s, "tokenizer.ggml.eos_token_id", uint32_t(tokens.size() - 1));
  put_str(s, "tokenizer.ggml.add_bos_token");
  put_u32(s, 7);
  s.push_back('\1');
  put_str(s, "nested");  // [[1.5, -2.0], []]
  put_u32(s, 9);
  put_u32(s, 9);
  put_u64(s, 2);
  put_u32(s, 6);
  put_u64(s, 2);
  for (float f : {1.5f, -2.0f}) s.append(reinterpret_cast<const char*>(&f), 4);
  put_u32(s, 6);
  put_u64(s, 0);
  // Tensor infos: Q8_0 [32], F16 [4], F32 [4].
  put_str(s, "q");
  put_u32(s, 1);
  put_u64(s, 32);
  put_u32(s, 8);
  put_u64(s, 0);
  put_str(s, "h");
  put_u32(s, 1);
  put_u64(s, 4);
  put_u32(s, 1);
  put_u64(s, 64);
  put_str(s, "f");
  put_u32(s, 2);
  put_u64(s, 2);
  put_u64(s, 2);
  put_u32(s, 0);
  put_u64(s, 96);
  s.append((32 - s.size() % 32) % 32, '\0');
  std::string data(112, '\0');
  const uint16_t half_one = 0x3C00;
  std::memcpy(&data[0], &half_one, 2);
  for (int j = 0; j < 32; ++j) data[2 + j] = static_cast<char>(j - 16);
  for (int j = 0; j < 4; ++j) std::memcpy(&data[64 + 2 * j], &half_one, 2);
  for (int j = 0; j < 4; ++j) {
    const float f = float(j) - 1.5f;
    std::memcpy(&data[96 + 4 * j], &f, 4);
  }
  seed("gguf", "tiny_llama", s + data);
  std::string v2 = "GGUF";
  put_u32(v2, 2);
  put_u64(v2, 0);
  put_u64(v2, 1);
  kv_str(v2, "general.name", "x");
  seed("gguf", "v2_metadata_only", v2);
  // Found by the fuzzer: an empty F32 tensor made dequantize call memcpy with a null destination.
  std::string empty = "GGUF";
  put_u32(empty, 3);
  put_u64(empty, 1);
  put_u64(empty, 0);
  put_str(empty, "e");
  put_u32(empty, 1);
  put_u64(empty, 0);
  put_u32(empty, 0);
  put_u64(empty, 0);
  empty.append((32 - empty.size() % 32) % 32, '\0');
  seed("gguf", "found_empty_f32_tensor", empty);
}

void tokenizer_json_seeds() {
  nlohmann::json vocab = nlohmann::json::object();
  for (int b = 0; b < 256; ++b) vocab[dflash::tok::bytes_to_alphabet(std::string(1, char(b)))] = b;
  const std::vector<std::string> merges = {"h e", "l l", "he ll", "Ġ w", "1 2"};
  int next = 256;
  for (const auto& m : merges) vocab[m.substr(0, m.find(' ')) + m.substr(m.find(' ') + 1)] = next++;
  auto added = [](int id, const char* content, bool special) {
    return nlohmann::json{{"id", id},         {"content", content}, {"single_word", false}, {"lstrip", false},
                          {"rstrip", false},  {"normalized", !special}, {"special", special}};
  };
  nlohmann::json t = {
      {"version", "1.0"},
      {"truncation", nullptr},
      {"padding", nullptr},
      {"added_tokens", {added(next, "<|im_start|>", true), added(next + 1, "<|im_end|>", true)}},
      {"normalizer", nullptr},
      {"pre_tokenizer",
       {{"type", "Sequence"},
        {"pretokenizers",
         {{{"type", "Digits"}, {"individual_digits", true}},
          {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", true}}}}}},
      {"post_processor", {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", false}, {"use_regex", true}}},
      {"decoder", {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true}, {"use_regex", true}}},
      {"model",
       {{"type", "BPE"}, {"dropout", nullptr}, {"unk_token", nullptr}, {"continuing_subword_prefix", nullptr},
        {"end_of_word_suffix", nullptr}, {"fuse_unk", false}, {"byte_fallback", false}, {"vocab", vocab},
        {"merges", merges}}}};
  seed("tokenizer_json", "digits_bytelevel", t.dump());
  // Qwen2-style: NFC, the Qwen2 split regex, merges as pairs, a TemplateProcessing post-processor.
  t["normalizer"] = {{"type", "NFC"}};
  t["pre_tokenizer"] = {
      {"type", "Sequence"},
      {"pretokenizers",
       {{{"type", "Split"},
         {"pattern", {{"Regex", dflash::tok::split_regex_source(dflash::tok::SplitRegex::QWEN2)}}},
         {"behavior", "Isolated"},
         {"invert", false}},
        {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", false}, {"use_regex", false}}}}};
  nlohmann::json pairs = nlohmann::json::array();
  for (const auto& m : merges) pairs.push_back({m.substr(0, m.find(' ')), m.substr(m.find(' ') + 1)});
  t["model"]["merges"] = pairs;
  t["post_processor"] = {{"type", "TemplateProcessing"},
                         {"single", {{{"SpecialToken", {{"id", "<|im_start|>"}, {"type_id", 0}}}},
                                     {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}}},
                         {"special_tokens", {{"<|im_start|>", {{"id", "<|im_start|>"}, {"ids", {next}}, {"tokens", {"<|im_start|>"}}}}}}};
  seed("tokenizer_json", "qwen2_style", t.dump());
}

void train_config_seeds() {
  // The first byte picks the format: odd = YAML, even = JSON.
  seed("train_config", "yaml", "\x01# a run\ntarget: models/t.gguf\ndata: d.jsonl\nout: runs/a\nmask_token_id: 0\n"
                               "target_layer_ids: [1, 15, 28]\ndrafter_devices:\n  - cpu\n  - cpu\nlr: 6.0e-4\n"
                               "steps: 200\nresume: false\nbudget: 90GB\nactivation_checkpoint: every:2\n");
  seed("train_config", "json",
       std::string("\x02") + R"({"target": "t.gguf", "data": "d.jsonl", "out": "o", "num_anchors": 64, "max_len": 256,)"
                             R"( "threads": 2, "lr": 3e-4, "clip": 1.0, "drafter_devices": ["cpu"], "target_layer_ids": [1, 9]})");
  seed("train_config", "yaml_two_docs", "\x03lr: 1e-3\n---\nsteps: 5\n");
  seed("train_config", "family_settings",  // issue 49: every family setting, each with its own range
       std::string("\x02") + R"({"drafter_family": "dflash2", "conv_kernel_size": 2, "conv_group_size": 16,)"
                             R"( "selector_rank": 256, "selector_top_k": 16, "selector_candidates": "strict",)"
                             R"( "selector_stop_gradient": true, "selector_loss_weight": 1e300})");
  seed("train_config", "dspark_settings",
       "\x01drafter_family: dspark\nmarkov_rank: 65537\nmarkov_head_type: gated\nce_loss_weight: 0.1\n"
       "l1_loss_weight: 0.9\nconfidence_loss_weight: 1.0\nenable_confidence_head: false\ngamma: 4\ndraft_vocab: 8\n");
  // Inputs the fuzzer found once (kept as seeds so every run retries them):
  seed("train_config", "found_yaml_cpp_loadall_hang", "\x03,r\n");  // yaml-cpp 0.7 LoadAll looped forever
  seed("train_config", "found_invalid_utf8_value", "\x03lr: li=udata \xb5\x35\n5\n");  // json dump threw type_error
}

void jsonl_seeds() {
  seed("jsonl", "token_records",
       "{\"index\": 0, \"split\": \"train\", \"input_ids\": [1, 2, 3, 4], \"loss_mask\": [0, 0, 1, 1]}\n\n"
       "{\"input_ids\": [5, 6], \"loss_mask\": [true, false], \"source\": \"alpaca.jsonl\"}\n"
       "{\"input_ids\": [5, 6], \"loss_mask\": [1");
  seed("jsonl", "prompts",
       "{\"messages\": [{\"role\": \"system\", \"content\": \"be brief\"}, {\"role\": \"user\", \"content\": \"hi\"},"
       " {\"role\": \"assistant\", \"content\": \"hello\"}]}\n"
       "{\"prompt_ids\": [1, 2, 3]}\n{\"turns\": [\"first\", \"second\"]}\n{\"question\": \"2+2?\"}\n{\"prompt\": \"def f():\"}\n");
}

void shard_index_seeds() {
  seed("shard_index", "index",
       R"({"format": "dflash-hidden-v1", "samples": 3, "shards": [{"file": "shard-00000.safetensors", "samples": 2},)"
       R"( {"file": "shard-00001.safetensors", "samples": 1}]})");
  seed("shard_index", "metadata", "target_layer_ids=1,9,17\nhidden_size=576\ntarget_num_layers=30\ntarget=smollm2\n");
  seed("shard_index", "ids", "1,9,17");
}

void device_list_seeds() {
  // Valid layouts of each shape, then the near misses the grammar refuses (issue 36 class 3).
  const char* const specs[][2] = {
      {"cpu", "cpu"},
      {"two_stages", "cuda:0,cuda:1"},
      {"replicas", "cuda:0,cuda:1;cuda:2,cuda:3"},
      {"cpu_replicas", "cpu;cpu;cpu"},
      {"spaces", " cuda:0 , cuda:1 ; cuda:2 , cuda:3 "},
      {"bare_cuda", "cuda;cpu:0"},
      {"max_index", "cuda:127"},
      {"wraps", "cuda:256"},
      {"leading_zeros", "cuda:0000000000000000000000001"},
      {"empty_stage", "cuda:0,,cuda:1"},
      {"empty_replica", "cpu;;cpu"},
      {"trailing", "cpu,cpu;"},
      {"unknown_type", "gpu:0"},
      {"mixed_shapes", "cpu,cpu;cpu"},
      {"repeat_gpu", "cuda:1;cuda:1"},
      {"tab", "cuda:0\t,cpu"},
      {"newline", "cpu\ncpu"},
      {"cpu_index", "cpu:1"},
      {"sign", "cuda:-1"},
  };
  for (const auto& [name, text] : specs) seed("device_list", name, text);
  seed("device_list", "nul", std::string("cuda:0\0,cpu", 11));
}

// model_settings: byte 0 picks a target config (0), a drafter config (1), a JSON (2) or YAML (3) train config.
void model_settings_seeds() {
  const std::string llama = R"({"model_type": "llama", "vocab_size": 64, "hidden_size": 32, "intermediate_size": 64,)"
                            R"( "num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 2,)"
                            R"( "max_position_embeddings": 2048, "rms_norm_eps": 1e-5, "rope_theta": 500000.0)";
  seed("model_settings", "target_llama3", std::string(1, '\0') + llama +
       R"(, "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,)"
       R"( "original_max_position_embeddings": 1024}})");
  seed("model_settings", "target_yarn", std::string(1, '\0') + llama +
       R"(, "rope_parameters": {"rope_type": "yarn", "rope_theta": 500000.0, "factor": 4.0, "beta_fast": 32,)"
       R"( "beta_slow": 1, "mscale": 1.0, "mscale_all_dim": 0.5, "original_max_position_embeddings": 512}})");
  seed("model_settings", "target_dynamic", std::string(1, '\0') + llama + R"(, "rope_scaling": {"type": "dynamic", "factor": 2.0}})");
  seed("model_settings", "drafter_linear",
       std::string("\x01") +
           R"({"architectures": ["DFlashDraftModel"], "model_type": "qwen3", "hidden_size": 32, "intermediate_size": 64,)"
           R"( "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 8, "num_hidden_layers": 2,)"
           R"( "num_target_layers": 8, "vocab_size": 64, "rms_norm_eps": 1e-6, "rope_theta": 10000.0,)"
           R"( "max_position_embeddings": 4096, "rope_scaling": {"rope_type": "linear", "factor": 2.0},)"
           R"( "layer_types": ["sliding_attention", "full_attention"], "sliding_window": 64, "block_size": 16,)"
           R"( "dflash_config": {"mask_token_id": 3, "target_layer_ids": [1, 4]}})");
  seed("model_settings", "train_loss",
       std::string("\x02") + R"({"target": "t", "data": "d", "out": "o", "gamma": 7.0, "kl_weight": 0.15,)"
                             R"( "loss_decay": "exp", "attention_backend": "auto", "loss_chunk_rows": 512, "block_size": 16})");
  seed("model_settings", "train_no_decay",
       "\x03target: t\ndata: d\nout: o\nloss_decay: none\nattention_backend: reference\nlr: 1.0e-4\neps: 1.0e-8\n");
  // The families' settings (issue 49): DSpark's heads and loss weights, DFlash2's convs, selector and its weight.
  const std::string backbone =
      R"("model_type": "qwen3", "hidden_size": 32, "intermediate_size": 64, "num_attention_heads": 4,)"
      R"( "num_key_value_heads": 2, "head_dim": 8, "num_hidden_layers": 2, "num_target_layers": 8, "vocab_size": 64,)"
      R"( "rms_norm_eps": 1e-6, "rope_theta": 10000.0, "block_size": 16)";
  seed("model_settings", "drafter_dspark",
       std::string("\x01") + R"({"architectures": ["Qwen3DSparkModel"], )" + backbone +
           R"(, "mask_token_id": 3, "target_layer_ids": [1, 4], "markov_rank": 8, "markov_head_type": "gated",)"
           R"( "enable_confidence_head": true, "confidence_head_with_markov": false})");
  seed("model_settings", "drafter_dflash2",
       std::string("\x01") + R"({"architectures": ["DFlash2DraftModel"], )" + backbone +
           R"(, "dflash_config": {"mask_token_id": 3, "target_layer_ids": [1, 4], "conv_kernel_size": 2,)"
           R"( "conv_group_size": 16, "selector_rank": 8, "selector_top_k": 4}})");
  seed("model_settings", "train_dspark",
       std::string("\x02") + R"({"target": "t", "data": "d", "out": "o", "drafter_family": "dspark", "gamma": 4.0,)"
                             R"( "markov_rank": 16, "markov_head_type": "rnn", "ce_loss_weight": 0.1,)"
                             R"( "l1_loss_weight": 0.9, "confidence_loss_weight": 1.0})");
  seed("model_settings", "train_dflash2",
       "\x03target: t\ndata: d\nout: o\ndrafter_family: dflash2\nconv_kernel_size: 3\nconv_group_size: 8\n"
       "selector_rank: 32\nselector_top_k: 8\nselector_candidates: inject\nselector_loss_weight: 2.5\n");
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: make_fuzz_seeds OUT_DIR\n");
    return 2;
  }
  g_out = argv[1];
  safetensors_seeds();
  gguf_seeds();
  tokenizer_json_seeds();
  train_config_seeds();
  jsonl_seeds();
  shard_index_seeds();
  device_list_seeds();
  model_settings_seeds();
  return 0;
}
