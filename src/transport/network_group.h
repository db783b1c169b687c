#pragma once
// One c10d process group: the members of one group epoch (group_epochs.h), connected over the
// network. Gloo on CPU; NCCL when the buffers live on a CUDA device. Every call blocks until it
// completes on this rank and throws GroupFailure when a peer dies or stays silent past the
// timeout; the group is then unusable and is dropped (the exchange forms the next epoch).
// Torch-free header.
#include <cstddef>
#include <memory>
#include <stdexcept>
#include <string>

#include "transport/c10d_store.h"

namespace gradbox::transport {

enum class NetworkBackend { gloo, nccl };
// The precision of the bytes on the wire. bf16 goes as fp16 over Gloo, which has no bf16 sum.
enum class WireDtype { fp32, fp16, bf16 };
WireDtype parse_wire_dtype(const std::string& name, const std::string& flag);
const char* wire_dtype_name(WireDtype dtype);
NetworkBackend parse_network_backend(const std::string& name, const std::string& flag);
const char* network_backend_name(NetworkBackend backend);
bool nccl_compiled_in();

class GroupFailure : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct GroupSpec {
  std::string prefix;  // the epoch's keys in the store ("run1/e3/pg/")
  int rank = 0;
  int size = 1;
  NetworkBackend backend = NetworkBackend::gloo;
  std::string interface;        // Gloo: the network interface ("eth0", "lo"); empty: the hostname's address
  double timeout_s = 60;        // per collective, and for the rendezvous
  size_t bucket_floats = 4u << 20;  // the unit of pipelined all-reduces (16 MB of fp32)
  WireDtype wire = WireDtype::fp32;  // the gradient buckets' (control values are always fp64)
  int cuda_device = 0;               // NCCL: this rank's GPU (each rank needs its own)
};

class NetworkGroup {
 public:
  NetworkGroup(C10dFileStore& store, const GroupSpec& spec);
  ~NetworkGroup();
  NetworkGroup(const NetworkGroup&) = delete;
  NetworkGroup& operator=(const NetworkGroup&) = delete;

  int rank() const { return spec_.rank; }
  int size() const { return spec_.size; }
  // data[0, n) = sum over ranks, in buckets all-reduced back to back. `prepare(begin, end)` is
  // called for each bucket just before it is sent (the exchange fills it there, so that filling
  // bucket b+1 overlaps sending bucket b).
  template <class Prepare>
  void sum(float* data, size_t n, Prepare&& prepare);
  void sum(float* data, size_t n) {
    sum(data, n, [](size_t, size_t) {});
  }
  // Starts data[0, n) = sum over ranks without waiting for it (the network transport's buckets,
  // started as backward finishes them); data must stay untouched until wait_started() returns,
  // which waits for every started sum, in the order they were started.
  void start_sum(float* data, size_t n);
  void wait_started();
  // Small control values, summed or maximised in double.
  void sum(double* values, size_t n);
  void max(double* values, size_t n);
  void broadcast(float* data, size_t n, int root);

  struct Impl;

 private:
  void sum_buckets(float* data, size_t n, void (*prepare)(void*, size_t, size_t), void* context);
  GroupSpec spec_;
  std::unique_ptr<Impl> impl_;
};

template <class Prepare>
void NetworkGroup::sum(float* data, size_t n, Prepare&& prepare) {
  sum_buckets(
      data, n, [](void* context, size_t begin, size_t end) { (*static_cast<Prepare*>(context))(begin, end); },
      &prepare);
}

}  // namespace gradbox::transport
