#pragma once
// The Mirror of real runs: a worker's local folder, kept in step with the shared folder by
// gradbox-sync as Note [The syncer contract] (sync_contract.h) describes. Torch-free.
#include <filesystem>

#include "mirror/mirror.h"

namespace gradbox::mirror {

class DiskMirror final : public Mirror {
 public:
  // Creates local/{outbox,inbox} when missing.
  explicit DiskMirror(std::filesystem::path local);

  void publish(const std::string& rel, std::string_view bytes) override;
  bool published(const std::string& rel) override;
  std::optional<std::string> read_published(const std::string& rel) override;
  std::vector<std::string> list_published(const std::string& dir) override;
  bool landed(const std::string& rel) override;
  void withdraw(const std::string& rel) override;

  std::vector<Arrival> list(const std::string& dir) override;
  std::vector<std::string> list_dirs(const std::string& dir) override;
  std::optional<std::string> read(const std::string& rel) override;
  bool read_into(const std::string& rel, std::string& out) override;
  bool read_published_into(const std::string& rel, std::string& out) override;
  void request(const std::string& rel) override;
  void forget(const std::string& rel) override;

  std::optional<std::string> control() override;
  uint64_t settled_passes() override;
  std::string where(const std::string& rel) const override;

  const std::filesystem::path& local() const { return local_; }

 private:
  std::filesystem::path local_, outbox_, inbox_, requests_;
};

}  // namespace gradbox::mirror
