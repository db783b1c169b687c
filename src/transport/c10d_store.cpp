#include "transport/c10d_store.h"

#include <torch/csrc/distributed/c10d/FileStore.hpp>

#include <climits>

#include "common/error.h"
#include "transport/c10d_store_native.h"

namespace gradbox::transport {

C10dFileStore::C10dFileStore(const std::filesystem::path& path) : path_(path) {
  std::error_code ec;
  std::filesystem::create_directories(path.parent_path(), ec);
  GB_REQUIRE(!ec, "--shared: cannot make ", path.parent_path().string(), " for the c10d store: ", ec.message());
  // numWorkers is the count of users after which c10d deletes the file; members come and go,
  // so never.
  native_ = std::make_unique<Native>();
  native_->store = c10::make_intrusive<c10d::FileStore>(path.string(), INT_MAX);
}

C10dFileStore::~C10dFileStore() = default;

void C10dFileStore::set(const std::string& key, const std::string& value) { native_->store->set(key, value); }

std::optional<std::string> C10dFileStore::get(const std::string& key) {
  if (!native_->store->check({key})) return std::nullopt;
  const std::vector<uint8_t> bytes = native_->store->get(key);
  return std::string(bytes.begin(), bytes.end());
}

int64_t C10dFileStore::add(const std::string& key, int64_t delta) { return native_->store->add(key, delta); }

std::string C10dFileStore::set_once(const std::string& key, const std::string& desired) {
  return native_->store->compareSet(key, "", desired);
}

}  // namespace gradbox::transport
