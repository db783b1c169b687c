#pragma once
// C10dFileStore's LibTorch side, shared with network_group.cpp only.
#include <torch/csrc/distributed/c10d/Store.hpp>

#include "transport/c10d_store.h"

namespace gradbox::transport {

struct C10dFileStore::Native {
  c10::intrusive_ptr<c10d::Store> store;
};

}  // namespace gradbox::transport
