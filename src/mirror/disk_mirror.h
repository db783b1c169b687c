#pragma once
// The Mirror of real runs: a worker's local folder, kept in step with the shared folder by
// gradbox-sync as Note [The syncer contract] (sync_contract.h) describes. Torch-free.
#include <filesystem>
#include <mutex>
#include <optional>

#include "mirror/mirror.h"

namespace gradbox::mirror {

class DiskMirror final : public Mirror {
 public:
  // Creates local/{outbox,inbox} when missing.
  explicit DiskMirror(std::filesystem::path local);
  ~DiskMirror() override;  // deletes the files it kept to recycle

  void publish(const std::string& rel, std::string_view bytes) override;
  void publish_pieces(const std::string& rel, std::span<const std::string_view> pieces) override;
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
  // Files withdrawn and kept to be written over (Note [Recycled files]), and how many
  // publishes wrote over one.
  size_t recycled_files() const;
  uint64_t publishes_recycled() const;

  // Files at least this large are worth recycling; at most kMaxRecycled are kept.
  static constexpr uint64_t kRecycleMinBytes = uint64_t{1} << 20;
  static constexpr size_t kMaxRecycled = 64;

 private:
  struct Recycled {
    std::filesystem::path path;
    uint64_t size;
  };
  void withdraw_file(const std::filesystem::path& path);
  void withdraw_tree(const std::filesystem::path& dir);
  std::optional<std::filesystem::path> take_recycled(uint64_t size);

  std::filesystem::path local_, outbox_, inbox_, requests_, recycled_;
  mutable std::mutex recycle_mutex_;
  std::vector<Recycled> recycled_list_;  // oldest first
  uint64_t recycle_seq_ = 0;
  uint64_t publishes_recycled_ = 0;
};

}  // namespace gradbox::mirror
