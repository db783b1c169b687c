#include "worker/runtime.h"

#include <ATen/autocast_mode.h>
#include <ATen/cuda/CUDAContext.h>
#include <sched.h>

#include <thread>

#include "common/error.h"

namespace gradbox::worker {

int64_t available_cores() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0) return std::max(1, CPU_COUNT(&set));
  return std::max(1u, std::thread::hardware_concurrency());
}

std::string Runtime::describe() const {
  return str(device.str(), ", ", to_string(precision), ", ", threads, " thread", threads == 1 ? "" : "s");
}

Precision auto_precision(bool cuda, int compute_major) {
  if (!cuda) return Precision::fp32;
  return compute_major >= 8 ? Precision::bf16 : Precision::fp16;  // bf16 tensor cores from Ampere (8.0) on
}

Runtime resolve_runtime(const std::string& device, Precision precision, int64_t threads, int64_t local_workers) {
  Runtime rt;
  if (device == "auto") {
    rt.device = torch::cuda::is_available() ? torch::Device(torch::kCUDA, 0) : torch::Device(torch::kCPU);
  } else {
    try {
      rt.device = torch::Device(device);
    } catch (const std::exception&) {
      throw InputError(str("--device: cannot parse '", device, "' (auto, cpu, cuda, cuda:N)"));
    }
    GB_REQUIRE(rt.device.is_cpu() || rt.device.is_cuda(), "--device: '", device, "' is neither cpu nor cuda");
    if (rt.device.is_cuda()) {
      GB_REQUIRE(torch::cuda::is_available(), "--device ", device, ": no CUDA device is available here");
      GB_REQUIRE(rt.device.index() < static_cast<int>(torch::cuda::device_count()), "--device ", device,
                 ": only ", torch::cuda::device_count(), " CUDA devices");
    }
  }
  if (precision == Precision::auto_select)
    precision = auto_precision(rt.device.is_cuda(),
                               rt.device.is_cuda() ? at::cuda::getDeviceProperties(rt.device.index() < 0 ? 0 : rt.device.index())->major : 0);
  GB_REQUIRE(!(precision == Precision::fp16 && rt.device.is_cpu()),
             "--precision fp16: needs a CUDA device (on CPU use fp32)");
  rt.precision = precision;

  rt.threads = threads > 0 ? threads : std::max<int64_t>(1, available_cores() / local_workers);
  // Denormal floats (tiny Adam moments and gradients late in a run) take a slow path on x86:
  // a GPT-2 124M step measured 2.4 s growing to 5.3 s without this. Set before the thread pool
  // starts, so its threads inherit the flag.
  if (rt.device.is_cpu()) at::globalContext().setFlushDenormal(true);
  at::set_num_threads(static_cast<int>(rt.threads));
  return rt;
}

AutocastScope::AutocastScope(const Runtime& runtime) {
  if (runtime.precision == Precision::fp32) return;
  device_type_ = runtime.device.type();
  previous_enabled_ = at::autocast::is_autocast_enabled(device_type_);
  previous_dtype_ = at::autocast::get_autocast_dtype(device_type_);
  at::autocast::set_autocast_enabled(device_type_, true);
  at::autocast::set_autocast_dtype(device_type_, runtime.precision == Precision::bf16 ? at::kBFloat16 : at::kHalf);
  at::autocast::increment_nesting();
  active_ = true;
}

AutocastScope::~AutocastScope() {
  if (!active_) return;
  // Cached casts of the weights are only valid within one forward pass.
  if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
  at::autocast::set_autocast_enabled(device_type_, previous_enabled_);
  at::autocast::set_autocast_dtype(device_type_, previous_dtype_);
}

}  // namespace gradbox::worker
