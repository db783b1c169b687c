#include "test_util.h"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <random>

#include "common/error.h"
#include "wire/envelope.h"

namespace gradbox::syncer::testing {

namespace {
// Removes the directories fresh_dir made when the test process ends, so a suite run leaves
// nothing in /tmp; GRADBOX_KEEP_TEST_DIRS=1 keeps them for a look after a failure.
struct MadeDirs {
  std::vector<fs::path> dirs;
  ~MadeDirs() {
    if (std::getenv("GRADBOX_KEEP_TEST_DIRS")) return;
    std::error_code ec;
    for (const auto& dir : dirs) fs::remove_all(dir, ec);
  }
};
MadeDirs made_dirs;
}  // namespace

fs::path fresh_dir(const std::string& name) {
  fs::path dir = fs::temp_directory_path() / str("gradbox_syncer_", name, "_", ::getpid());
  fs::remove_all(dir);
  fs::create_directories(dir);
  made_dirs.dirs.push_back(dir);
  return dir;
}

std::string framed_file(uint64_t seed, size_t payload_size) {
  std::mt19937_64 rng(seed);
  std::string payload(payload_size, '\0');
  for (auto& c : payload) c = static_cast<char>(rng());
  wire::FileHeader header;
  header.set_run_id("t");
  header.mutable_heartbeat()->set_worker(str("w", seed));
  header.mutable_heartbeat()->set_sequence(seed);
  return wire::frame(header, payload);
}

void write_bytes(const fs::path& path, const std::string& bytes) {
  fs::create_directories(path.parent_path());
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

std::string flag_of(const std::string& rel) { return str(rel, kFlagSuffix); }
std::string sent_of(const std::string& rel) { return str(rel, kSentSuffix); }

std::vector<std::string> files_under(const fs::path& dir) {
  std::vector<std::string> out;
  if (!fs::exists(dir)) return out;
  for (auto& e : fs::recursive_directory_iterator(dir))
    if (e.is_regular_file()) out.push_back(fs::relative(e.path(), dir).generic_string());
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace gradbox::syncer::testing
