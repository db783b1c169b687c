#include "transport/network_group.h"

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/torch.h>
#ifdef GRADBOX_HAS_GLOO
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#endif
#ifdef GRADBOX_HAS_NCCL
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

#include <chrono>
#include <deque>

#include "common/broken_pipe.h"
#include "common/error.h"
#include "transport/c10d_store_native.h"

namespace gradbox::transport {

NetworkBackend parse_network_backend(const std::string& name, const std::string& flag) {
  if (name == "gloo") return NetworkBackend::gloo;
  if (name == "nccl") {
    GB_REQUIRE(nccl_compiled_in(), flag, " nccl: this build of gradbox has no NCCL (its torch has no CUDA)");
    return NetworkBackend::nccl;
  }
  throw InputError(str(flag, " ", name, ": expected gloo or nccl"));
}

WireDtype parse_wire_dtype(const std::string& name, const std::string& flag) {
  if (name == "fp32") return WireDtype::fp32;
  if (name == "fp16") return WireDtype::fp16;
  if (name == "bf16") return WireDtype::bf16;
  throw InputError(str(flag, " ", name, ": expected fp32, fp16 or bf16"));
}

const char* wire_dtype_name(WireDtype dtype) {
  return dtype == WireDtype::fp16 ? "fp16" : dtype == WireDtype::bf16 ? "bf16" : "fp32";
}

const char* network_backend_name(NetworkBackend backend) { return backend == NetworkBackend::nccl ? "nccl" : "gloo"; }

bool nccl_compiled_in() {
#ifdef GRADBOX_HAS_NCCL
  return true;
#else
  return false;
#endif
}

// A bucket goes as it is (fp32 on the host) or as a converted copy (another dtype or device),
// which comes back into the host buffer once its all-reduce is done.
struct InFlight {
  c10::intrusive_ptr<c10d::Work> work;
  torch::Tensor host, wire;
};

struct NetworkGroup::Impl {
  c10::intrusive_ptr<c10d::Backend> backend;
  torch::Device device = torch::kCPU;  // where the collectives' tensors live
  torch::ScalarType wire = torch::kFloat32;
  std::deque<InFlight> in_flight;
};

namespace {

std::chrono::milliseconds millis(double seconds) {
  return std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000));
}

// Runs a c10d call; any failure (a closed connection, a timeout, a rendezvous that never
// completes) means the group is gone.
template <class F>
auto guarded(const char* what, F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (const InputError&) {
    throw;
  } catch (const c10::Error& e) {
    throw GroupFailure(str(what, ": ", e.what_without_backtrace()));
  } catch (const std::exception& e) {
    throw GroupFailure(str(what, ": ", e.what()));
  }
}

void wait(const c10::intrusive_ptr<c10d::Work>& work) {
  if (!work->wait()) throw GroupFailure("a collective was aborted");
}

}  // namespace

NetworkGroup::NetworkGroup(C10dFileStore& store, const GroupSpec& spec) : spec_(spec), impl_(std::make_unique<Impl>()) {
  survive_broken_pipes();  // Gloo writes to peers that may be dead: Note [A broken pipe is an error, not a death]
  auto prefixed = c10::make_intrusive<c10d::PrefixStore>(spec.prefix, store.native().store);
  guarded("forming the process group", [&] {
    if (spec.backend == NetworkBackend::gloo) {
#ifndef GRADBOX_HAS_GLOO
      throw InputError("--transport c10d: this gradbox was built without Gloo's headers (apt install libgloo-dev, "
                       "then rebuild)");
#else
      auto options = c10d::ProcessGroupGloo::Options::create(millis(spec.timeout_s));
      options->devices.push_back(spec.interface.empty()
                                     ? c10d::ProcessGroupGloo::createDefaultDevice()
                                     : c10d::ProcessGroupGloo::createDeviceForInterface(spec.interface));
      impl_->backend = c10::make_intrusive<c10d::ProcessGroupGloo>(prefixed, spec.rank, spec.size, options);
      return;
#endif
    }
#ifdef GRADBOX_HAS_NCCL
    auto options = c10d::ProcessGroupNCCL::Options::create();
    options->timeout = millis(spec.timeout_s);
    impl_->backend = c10::make_intrusive<c10d::ProcessGroupNCCL>(prefixed, spec.rank, spec.size, options);
    impl_->device = torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(spec.cuda_device));
#endif
  });
  impl_->wire = spec.wire == WireDtype::fp32 ? torch::kFloat32
                : spec.wire == WireDtype::bf16 && spec.backend == NetworkBackend::nccl ? torch::kBFloat16
                                                                                       : torch::kFloat16;
  // Gloo connects at its first collective: make that happen now, inside the rendezvous timeout.
  double probe = 0;
  sum(&probe, 1);
}

NetworkGroup::~NetworkGroup() {
  // A failed group may still have collectives queued: abort them rather than wait them out.
  try {
    if (impl_ && impl_->backend) impl_->backend->abort();
  } catch (...) {
  }
}

void NetworkGroup::start_sum(float* data, size_t n) {
  torch::Tensor host = torch::from_blob(data, {static_cast<int64_t>(n)}, torch::kFloat32);
  const bool in_place = impl_->device.is_cpu() && impl_->wire == torch::kFloat32;
  torch::Tensor wire = in_place ? host : host.to(impl_->device, impl_->wire);
  std::vector<torch::Tensor> tensors{wire};
  impl_->in_flight.push_back({guarded("all-reduce", [&] { return impl_->backend->allreduce(tensors); }), host, wire});
}

void NetworkGroup::wait_started() {
  while (!impl_->in_flight.empty()) {
    InFlight bucket = std::move(impl_->in_flight.front());
    impl_->in_flight.pop_front();
    guarded("all-reduce", [&] { wait(bucket.work); });
    if (!bucket.wire.is_same(bucket.host)) bucket.host.copy_(bucket.wire);
  }
}

void NetworkGroup::sum_buckets(float* data, size_t n, void (*prepare)(void*, size_t, size_t), void* context) {
  if (n == 0) prepare(context, 0, 0);
  for (size_t begin = 0; begin < n; begin += spec_.bucket_floats) {
    const size_t end = std::min(n, begin + spec_.bucket_floats);
    prepare(context, begin, end);
    start_sum(data + begin, end - begin);
  }
  wait_started();
}

namespace {

void reduce_small(c10d::Backend& backend, torch::Device device, double* values, size_t n, c10d::ReduceOp op) {
  torch::Tensor host = torch::from_blob(values, {static_cast<int64_t>(n)}, torch::kFloat64);
  torch::Tensor t = device.is_cpu() ? host : host.to(device);
  std::vector<torch::Tensor> tensors{t};
  c10d::AllreduceOptions options;
  options.reduceOp = op;
  guarded("all-reduce", [&] { wait(backend.allreduce(tensors, options)); });
  if (!device.is_cpu()) host.copy_(t);
}

}  // namespace

void NetworkGroup::sum(double* values, size_t n) {
  reduce_small(*impl_->backend, impl_->device, values, n, c10d::ReduceOp::SUM);
}

void NetworkGroup::max(double* values, size_t n) {
  reduce_small(*impl_->backend, impl_->device, values, n, c10d::ReduceOp::MAX);
}

void NetworkGroup::broadcast(float* data, size_t n, int root) {
  for (size_t begin = 0; begin < n; begin += spec_.bucket_floats) {
    const size_t end = std::min(n, begin + spec_.bucket_floats);
    torch::Tensor host = torch::from_blob(data + begin, {static_cast<int64_t>(end - begin)}, torch::kFloat32);
    torch::Tensor t = impl_->device.is_cpu() ? host : host.to(impl_->device);
    std::vector<torch::Tensor> tensors{t};
    c10d::BroadcastOptions options;
    options.rootRank = root;
    guarded("broadcast", [&] { wait(impl_->backend->broadcast(tensors, options)); });
    if (!impl_->device.is_cpu()) host.copy_(t);
  }
}

}  // namespace gradbox::transport
