// The LibTorch op from C++: autograd through the dispatcher, thread safety (8 threads at once give
// bit-identical results to serial runs) and C++-side errors.
#include <gtest/gtest.h>

#include <thread>
#include <vector>

#include <ATen/ATen.h>
#include <torch/autograd.h>

#include "anchor_attention_op.h"

namespace {

struct Inputs {
  at::Tensor q, k, v, anchors, keep, dout;
};

Inputs make_inputs(int64_t seed, at::ScalarType dtype) {
  at::manual_seed(seed);
  const int64_t batch = 2, S = 120, N = 8, B = 16, Hq = 4, Hkv = 2, D = 64;
  const auto opt = at::TensorOptions().dtype(dtype);
  Inputs in;
  in.q = at::randn({batch, N * B, Hq, D}, opt);
  in.k = at::randn({batch, S + N * B, Hkv, D}, opt);
  in.v = at::randn({batch, S + N * B, Hkv, D}, opt);
  in.dout = at::randn({batch, N * B, Hq, D}, opt);
  in.anchors = at::randint(0, S + 1, {batch, N}, at::kLong);
  in.keep = at::rand({batch, N}) > 0.2;
  return in;
}

std::vector<at::Tensor> forward_backward(const Inputs& in) {
  auto q = in.q.clone().requires_grad_();
  auto k = in.k.clone().requires_grad_();
  auto v = in.v.clone().requires_grad_();
  auto out = dflash::ops::anchor_block_attention(q, k, v, in.anchors, in.keep, 16);
  auto grads = torch::autograd::grad({out}, {q, k, v}, {in.dout});
  return {out.detach(), grads[0], grads[1], grads[2]};
}

TEST(AnchorAttentionOp, EightThreadsBitIdenticalToSerial) {
  constexpr int kThreads = 8;
  std::vector<Inputs> inputs;
  std::vector<std::vector<at::Tensor>> serial;
  for (int i = 0; i < kThreads; ++i) {
    inputs.push_back(make_inputs(100 + i, i % 2 ? at::kFloat : at::kBFloat16));
    serial.push_back(forward_backward(inputs.back()));
  }
  std::vector<std::vector<at::Tensor>> parallel(kThreads);
  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; ++i)
    threads.emplace_back([&, i] {
      for (int rep = 0; rep < 2; ++rep) parallel[i] = forward_backward(inputs[i]);
    });
  for (auto& t : threads) t.join();
  for (int i = 0; i < kThreads; ++i)
    for (size_t j = 0; j < 4; ++j) EXPECT_TRUE(at::equal(serial[i][j], parallel[i][j])) << "thread " << i << " output " << j;
}

TEST(AnchorAttentionOp, GradientsFlowOnlyToQKV) {
  Inputs in = make_inputs(7, at::kDouble);
  auto q = in.q.clone().requires_grad_();
  auto out = dflash::ops::anchor_block_attention(q, in.k, in.v, in.anchors, in.keep, 16, 0, 0.125);
  EXPECT_TRUE(out.requires_grad());
  out.sum().backward();
  ASSERT_TRUE(q.grad().defined());
  EXPECT_GT(q.grad().abs().max().item<double>(), 0.0);
}

TEST(AnchorAttentionOp, NoGradModeRunsWithoutGraph) {
  Inputs in = make_inputs(8, at::kFloat);
  at::NoGradGuard no_grad;
  auto out = dflash::ops::anchor_block_attention(in.q.requires_grad_(), in.k, in.v, in.anchors, in.keep, 16);
  EXPECT_FALSE(out.requires_grad());
}

TEST(AnchorAttentionOp, BadHeadRatioIsAClearError) {
  Inputs in = make_inputs(9, at::kFloat);
  auto k3 = at::randn({2, in.k.size(1), 3, 64});
  try {
    dflash::ops::anchor_block_attention(in.q, k3, k3, in.anchors, in.keep, 16);
    FAIL() << "expected an error";
  } catch (const c10::Error& e) {
    EXPECT_NE(std::string(e.what()).find("q heads (4) must be a multiple of kv heads (3)"), std::string::npos) << e.what();
  }
}

}  // namespace
