// libtorch's cost of one relu on a one-element tensor, plain and recorded
// with its backward, in µs per call: the C++ side of the `tiny/relu/*`
// rows of `simpleop bench` (bench/results.py shows it next to them).
//
// Build against the libtorch inside a PyTorch wheel (`pip install torch`),
// then run it on the quiet machine:
//
//   T=$(python3 -c 'import torch, os; print(os.path.dirname(torch.__file__))')
//   g++ -O2 -std=c++20 bench/libtorch_relu.cpp -I$T/include \
//       -I$T/include/torch/csrc/api/include -L$T/lib -ltorch_cpu -lc10 \
//       -Wl,-rpath,$T/lib -o target/libtorch_relu
//   target/libtorch_relu > bench/out/libtorch.jsonl
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdio>

int main() {
  torch::set_num_threads(2);
  auto one = torch::tensor({0.5f});
  auto var = torch::tensor({0.5f}, torch::requires_grad());
  const int calls = 200000;
  auto per_call_us = [&](auto f) {
    double best = 1e9;
    for (int round = 0; round < 5; ++round) {
      auto start = std::chrono::steady_clock::now();
      for (int i = 0; i < calls; ++i) f();
      std::chrono::duration<double, std::micro> took = std::chrono::steady_clock::now() - start;
      best = std::min(best, took.count() / calls);
    }
    return best;
  };
  double plain = per_call_us([&] { auto y = torch::relu(one); });
  double recorded = per_call_us([&] {
    auto y = torch::relu(var);
    y.backward();
  });
  std::printf("{\"libtorch\": \"%s\", \"relu_us\": %.4f, \"recorded_relu_backward_us\": %.4f}\n",
              TORCH_VERSION, plain, recorded);
}
