#pragma once
#include <filesystem>
#include <string>
#include <vector>

namespace gradbox::syncer::testing {

namespace fs = std::filesystem;

// An empty directory unique to this process and name.
fs::path fresh_dir(const std::string& name);
// A complete framed gradbox file (heartbeat body, run "t") with a random payload.
std::string framed_file(uint64_t seed, size_t payload_size = 300);
void write_bytes(const fs::path& path, const std::string& bytes);  // plain write, makes dirs
// Regular files under dir as relative generic paths, sorted.
std::vector<std::string> files_under(const fs::path& dir);

}  // namespace gradbox::syncer::testing
