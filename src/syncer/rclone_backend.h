#pragma once
// The shared folder as an rclone remote ("name:path"), driven by running the real rclone program
// (no shell): lsjson to list, copyto to move bytes, deletefile/rmdir to clean up. Each call is
// bounded by a timeout and its stderr becomes the error message.
#include <nlohmann/json.hpp>

#include "syncer/backend.h"

namespace gradbox::syncer {

class RcloneBackend : public Backend {
 public:
  RcloneBackend(std::string remote, std::string rclone_binary = "rclone", double timeout_seconds = 300);
  std::string name() const override { return "rclone"; }
  std::vector<RemoteEntry> list() override;
  std::optional<uint64_t> stat(const std::string& rel) override;
  void download(const std::string& rel, const fs::path& local_path) override;
  void upload(const fs::path& local_path, const std::string& rel, UploadMode mode) override;
  void remove(const std::string& rel) override;
  void remove_empty_dirs(const std::string& rel_dir) override;

 private:
  std::string remote_path(const std::string& rel) const;
  std::string run(std::vector<std::string> args, bool allow_not_found, bool* not_found);
  uint64_t size_of(const nlohmann::json& entry, const std::string& rel) const;

  std::string remote_;  // without a trailing '/'
  std::string binary_;
  double timeout_seconds_;
  bool stat_flag_ = true;  // lsjson --stat (rclone 1.55 on); off once rclone says it has none
};

}  // namespace gradbox::syncer
