// The loss weights of block slot k >= 1: w_k = exp(-(k-1)/gamma) (docs/DFLASH.md's decay, `loss_decay: exp`) or 1 for
// every slot (`loss_decay: none`, SpecForge's default). One spelling (exp | none) and one rule for gamma, for the
// trainer's settings, its workers and its producer alike. Torch-free.
#pragma once
#include <cstdint>
#include <optional>
#include <string>

namespace dflash::drafter {

enum class LossDecay { Exp, None };

std::optional<LossDecay> loss_decay_from_text(const std::string& s);  // "exp" | "none"
const char* loss_decay_name(LossDecay d);

// Gamma by block size (docs/DFLASH.md: 7 for B=16, 5 for B=10, 4 for B=8); other sizes get B/2 (>= 1).
double default_loss_gamma(int64_t block_size);
// The gamma the loss uses: `gamma` when > 0, else default_loss_gamma(block_size); with LossDecay::None, +inf:
// every slot k >= 1 weighs exp(-0) = 1.
double loss_gamma(double gamma, LossDecay decay, int64_t block_size);

}  // namespace dflash::drafter
