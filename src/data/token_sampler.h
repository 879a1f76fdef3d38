// Choosing the next token from logits: greedy (temperature 0) or sampling from softmax(logits / T) with a
// seeded generator. Shared by data regeneration and speculative evaluation, so both draw from the same
// distribution the same way.
#pragma once
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <random>
#include <vector>

namespace dflash::data {

// A generator for one prompt: the same (seed, stream) always gives the same draws, whatever ran before.
std::mt19937_64 make_rng(uint64_t seed, uint64_t stream);

// softmax(logits / temperature) of one row [V] in float64; temperature must be > 0.
std::vector<double> token_probs(const at::Tensor& logits_row, double temperature);

// Index drawn from `probs` (need not be normalised; must have a positive sum).
int64_t draw(const std::vector<double>& probs, std::mt19937_64& rng);

// Greedy argmax when temperature == 0, else a draw from token_probs.
int64_t next_token(const at::Tensor& logits_row, double temperature, std::mt19937_64& rng);

}  // namespace dflash::data
