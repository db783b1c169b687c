#pragma once
// Where and how the math runs: device, precision and CPU threads, resolved once per process.
#include <torch/torch.h>

#include <string>

#include "worker/train_config.h"

namespace gradbox::worker {

struct Runtime {
  torch::Device device = torch::kCPU;
  Precision precision = Precision::fp32;  // resolved: never auto_select
  int64_t threads = 1;
  std::string describe() const;
};

// device "auto" picks CUDA when present. precision "auto" (auto_precision) is bf16 on Ampere
// and newer GPUs (YaLM: bf16 compute with fp32 master weights, norms and softmax), fp16 with
// dynamic loss scaling on older ones (a T4, compute 7.5, has no bf16 tensor cores), and fp32 on
// CPU, where bf16 matmuls have no hardware support and run ~18x slower (Note [Mixed precision]).
// threads 0 means cores / local_workers, so several workers on one machine do not oversubscribe it.
Runtime resolve_runtime(const std::string& device, Precision precision, int64_t threads, int64_t local_workers);
Precision auto_precision(bool cuda, int compute_major);

// CPU cores this process may run on (affinity mask, as containers restrict it).
int64_t available_cores();

// Enables autocast for the runtime's precision in a scope (forward pass and loss only).
class AutocastScope {
 public:
  explicit AutocastScope(const Runtime& runtime);
  ~AutocastScope();
  AutocastScope(const AutocastScope&) = delete;
  AutocastScope& operator=(const AutocastScope&) = delete;

 private:
  bool active_ = false;
  c10::DeviceType device_type_ = c10::DeviceType::CPU;
  bool previous_enabled_ = false;
  at::ScalarType previous_dtype_ = at::kFloat;
};

}  // namespace gradbox::worker
