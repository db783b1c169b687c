#pragma once
// The strongly consistent key-value store the network transport agrees through: who is in
// each group epoch (group_epochs.h). Real runs use c10d's FileStore in the shared folder
// (c10d_store.h); tests may use any implementation. Torch-free.
#include <cstdint>
#include <optional>
#include <string>

namespace gradbox::transport {

class KeyValueStore {
 public:
  virtual ~KeyValueStore() = default;
  virtual void set(const std::string& key, const std::string& value) = 0;
  // The value, or nullopt when the key is not set; never waits.
  virtual std::optional<std::string> get(const std::string& key) = 0;
  // Adds delta to a counter (0 when unset) and returns the new value, atomically.
  virtual int64_t add(const std::string& key, int64_t delta) = 0;
  // Sets key to desired if it is unset; returns the value it holds afterwards (whoever won).
  virtual std::string set_once(const std::string& key, const std::string& desired) = 0;
};

}  // namespace gradbox::transport
