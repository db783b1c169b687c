#pragma once
// A c10d FileStore at a path every member can lock (Note [Network transport] in
// network_exchange.h): the agreement on each group epoch, and the rendezvous of the process
// group that epoch forms. It outlives any member, so a death never takes the store with it.
// Torch-free header; LibTorch stays in the .cpp.
#include <filesystem>
#include <memory>

#include "transport/key_value_store.h"

namespace gradbox::transport {

class C10dFileStore final : public KeyValueStore {
 public:
  explicit C10dFileStore(const std::filesystem::path& path);
  ~C10dFileStore() override;
  void set(const std::string& key, const std::string& value) override;
  std::optional<std::string> get(const std::string& key) override;
  int64_t add(const std::string& key, int64_t delta) override;
  std::string set_once(const std::string& key, const std::string& desired) override;
  const std::filesystem::path& path() const { return path_; }

  struct Native;  // the c10d::Store, for NetworkGroup's rendezvous
  Native& native() { return *native_; }

 private:
  std::filesystem::path path_;
  std::unique_ptr<Native> native_;
};

}  // namespace gradbox::transport
