#include "model/checkpoint.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/autocast_mode.h>

#include <mutex>
#include <optional>

#include "common/error.h"

namespace gradbox::model {

namespace {

at::Tensor get_rng_state(at::Generator gen) {
  std::lock_guard<std::mutex> lock(gen.mutex());
  return gen.get_state();
}

void set_rng_state(at::Generator gen, const at::Tensor& state) {
  std::lock_guard<std::mutex> lock(gen.mutex());
  gen.set_state(state);
}

struct AutocastState {
  bool enabled = false;
  at::ScalarType dtype = at::kFloat;

  static AutocastState current(at::DeviceType device) {
    return {at::autocast::is_autocast_enabled(device), at::autocast::get_autocast_dtype(device)};
  }
  void apply(at::DeviceType device) const {
    at::autocast::set_autocast_enabled(device, enabled);
    at::autocast::set_autocast_dtype(device, dtype);
  }
};

// What the first run saw, so the rerun in backward sees the same. Held by the autograd context
// as a capsule (saved_data holds IValues only).
struct CheckpointState : torch::CustomClassHolder {
  BlockFn fn;
  at::Tensor cpu_rng;
  std::optional<at::Device> cuda_device;
  at::Tensor cuda_rng;
  AutocastState autocast_cpu;
  AutocastState autocast_cuda;

  CheckpointState(BlockFn f, const at::Tensor& x) : fn(std::move(f)) {
    cpu_rng = get_rng_state(at::detail::getDefaultCPUGenerator());
    if (x.is_cuda()) {
      cuda_device = x.device();
      cuda_rng = get_rng_state(at::globalContext().defaultGenerator(x.device()));
    }
    autocast_cpu = AutocastState::current(at::kCPU);
    autocast_cuda = AutocastState::current(at::kCUDA);
  }
};

// Puts the first run's RNG and autocast state in place for the rerun; restores the current
// state when it goes out of scope, also when the rerun throws.
class ReplayGuard {
 public:
  explicit ReplayGuard(const CheckpointState& s) : s_(s) {
    cpu_rng_ = get_rng_state(at::detail::getDefaultCPUGenerator());
    set_rng_state(at::detail::getDefaultCPUGenerator(), s_.cpu_rng);
    if (s_.cuda_device) {
      cuda_rng_ = get_rng_state(at::globalContext().defaultGenerator(*s_.cuda_device));
      set_rng_state(at::globalContext().defaultGenerator(*s_.cuda_device), s_.cuda_rng);
    }
    autocast_cpu_ = AutocastState::current(at::kCPU);
    autocast_cuda_ = AutocastState::current(at::kCUDA);
    s_.autocast_cpu.apply(at::kCPU);
    s_.autocast_cuda.apply(at::kCUDA);
  }
  ~ReplayGuard() {
    set_rng_state(at::detail::getDefaultCPUGenerator(), cpu_rng_);
    if (s_.cuda_device) set_rng_state(at::globalContext().defaultGenerator(*s_.cuda_device), cuda_rng_);
    autocast_cpu_.apply(at::kCPU);
    autocast_cuda_.apply(at::kCUDA);
  }
  ReplayGuard(const ReplayGuard&) = delete;
  ReplayGuard& operator=(const ReplayGuard&) = delete;

 private:
  const CheckpointState& s_;
  at::Tensor cpu_rng_, cuda_rng_;
  AutocastState autocast_cpu_, autocast_cuda_;
};

class CheckpointFunction : public torch::autograd::Function<CheckpointFunction> {
 public:
  // Runs under no-grad (Function::apply disables it): fn's activations are not kept.
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x,
                               const BlockFn& fn) {
    auto state = c10::make_intrusive<CheckpointState>(fn, x);
    ctx->saved_data["state"] = c10::IValue::make_capsule(state);
    ctx->save_for_backward({x});
    return fn(x);
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_outputs) {
    auto state = c10::static_intrusive_pointer_cast<CheckpointState>(
        ctx->saved_data["state"].toCapsule());
    const auto saved = ctx->get_saved_variables();
    GB_CHECK(saved.size() == 1, "checkpoint saved ", saved.size(), " tensors");
    if (!grad_outputs.at(0).defined()) return {torch::Tensor(), torch::Tensor()};
    // A fresh leaf, so the rerun's graph ends here and x's gradient lands in its .grad.
    torch::Tensor x = saved[0].detach().requires_grad_(true);
    torch::Tensor y;
    {
      ReplayGuard replay(*state);
      torch::AutoGradMode grad_on(true);
      y = state->fn(x);
    }
    torch::autograd::backward({y}, {grad_outputs[0]});
    return {x.grad(), torch::Tensor()};  // nothing for fn
  }
};

}  // namespace

torch::Tensor checkpoint(const BlockFn& fn, const torch::Tensor& x) {
  if (!torch::GradMode::is_enabled() || !x.requires_grad()) return fn(x);
  return CheckpointFunction::apply(x, fn);
}

}  // namespace gradbox::model
