#include "syncer/sim_backend.h"

#include <sys/stat.h>

#include <cmath>
#include <nlohmann/json.hpp>
#include <thread>

#include "common/atomic_file.h"
#include "common/checksum.h"
#include "common/error.h"

namespace gradbox::syncer {
namespace {

int64_t now_unix_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch()).count();
}

std::optional<int64_t> mtime_ms(const fs::path& path) {
  struct ::stat st {};
  if (::stat(path.c_str(), &st) != 0) return std::nullopt;
  return int64_t{st.st_mtim.tv_sec} * 1000 + st.st_mtim.tv_nsec / 1000000;
}

constexpr double kZ90 = 1.2815515655446004;  // standard normal 90th percentile

}  // namespace

SimBackend::SimBackend(fs::path true_root, std::string viewer, SimOptions options)
    : truth_(std::move(true_root), MountedBackend::Transfers::copy), viewer_(std::move(viewer)), options_(std::move(options)),
      start_(std::chrono::steady_clock::now()) {
  if (options_.log_path) {
    if (options_.log_path->has_parent_path()) fs::create_directories(options_.log_path->parent_path());
    log_.open(*options_.log_path, std::ios::app);
    if (!log_) throw InputError(str("--sim-log: cannot open ", options_.log_path->string()));
  }
}

double SimBackend::uniform(const std::string& rel, uint64_t attempt, const char* kind) const {
  std::string key = str(options_.seed, '\0', viewer_, '\0', rel, '\0', attempt, '\0', kind);
  uint64_t h = checksum64(key.data(), key.size());
  return static_cast<double>(h >> 11) * (1.0 / 9007199254740992.0);  // [0, 1)
}

double SimBackend::lognormal_ms(const std::string& rel, const char* kind) const {
  if (options_.delay_median_ms <= 0) return 0;
  double mu = std::log(options_.delay_median_ms);
  double sigma = options_.delay_p90_ms > options_.delay_median_ms
                     ? (std::log(options_.delay_p90_ms) - mu) / kZ90 : 0.0;
  // Box-Muller from two hashed uniforms.
  double u1 = std::max(uniform(rel, 0, kind), 1e-12);
  double u2 = uniform(rel, 1, kind);
  double z = std::sqrt(-2 * std::log(u1)) * std::cos(2 * M_PI * u2);
  // Cap the far tail at 10x p90 so a scripted run has a bounded worst case.
  return std::min(std::exp(mu + sigma * z), 10 * std::max(options_.delay_p90_ms, options_.delay_median_ms));
}

double SimBackend::delay_ms(const std::string& rel) const { return lognormal_ms(rel, "delay"); }

SimBackend::View SimBackend::view_of(const std::string& rel, int64_t mtime, int64_t now) const {
  double visible_at = static_cast<double>(mtime) + delay_ms(rel);
  View v;
  v.visible = now >= visible_at;
  if (v.visible && uniform(rel, 0, "placeholder") < options_.placeholder_prob)
    v.placeholder = now < visible_at + lognormal_ms(rel, "placeholder_len");
  return v;
}

void SimBackend::record(const char* fault, const std::string& rel, const std::string& detail) {
  // mutex_ held by the caller
  ++faults_[fault];
  if (!log_.is_open()) return;
  auto t = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - start_).count();
  nlohmann::json line{{"t_ms", t}, {"viewer", viewer_}, {"fault", fault}, {"path", rel}, {"detail", detail}};
  log_ << line.dump() << '\n';
  log_.flush();
}

void SimBackend::throttle(uint64_t bytes) const {
  if (options_.bandwidth_mbps <= 0) return;
  std::this_thread::sleep_for(std::chrono::duration<double>(bytes * 8.0 / (options_.bandwidth_mbps * 1e6)));
}

std::vector<RemoteEntry> SimBackend::list() {
  std::vector<RemoteEntry> truth = truth_.list();
  int64_t now = now_unix_ms();
  std::lock_guard lock(mutex_);
  uint64_t call = list_calls_++;
  if (last_listing_ && uniform("", call, "stale_list") < options_.stale_list_prob) {
    record("stale_list", "", str("listing #", call, " repeats the previous one (", last_listing_->size(), " entries)"));
    return *last_listing_;
  }
  std::vector<RemoteEntry> out;
  for (auto& e : truth) {
    if (e.kind != RemoteEntry::Kind::file) {  // never read: no lag to simulate
      out.push_back(e);
      continue;
    }
    auto mtime = mtime_ms(truth_.root() / e.rel);
    if (!mtime) continue;
    View v = view_of(e.rel, *mtime, now);
    int& announced = announced_[e.rel];
    if (!v.visible) {
      if (!(announced & 1)) {
        announced |= 1;
        record("delay", e.rel, str("visible ", static_cast<int64_t>(delay_ms(e.rel)), " ms after its mtime"));
      }
      continue;
    }
    if (v.placeholder) {
      if (!(announced & 2)) {
        announced |= 2;
        record("placeholder", e.rel, "listed as 0 bytes");
      }
      e.size = 0;
    }
    if (uniform(e.rel, call, "missing") < options_.missing_prob) {
      record("missing", e.rel, str("dropped from listing #", call));
      continue;
    }
    out.push_back(e);
    if (uniform(e.rel, call, "duplicate") < options_.duplicate_prob) {
      record("duplicate", e.rel, str("listed twice in listing #", call));
      out.push_back(e);
    }
  }
  last_listing_ = out;
  return out;
}

std::optional<uint64_t> SimBackend::stat(const std::string& rel) { return truth_.stat(rel); }

void SimBackend::download(const std::string& rel, const fs::path& local_path) {
  check_rel(rel);
  const fs::path source = truth_.root() / rel;
  auto mtime = mtime_ms(source);
  if (!mtime) throw BackendError(str("sim: ", rel, " not found"));
  View v = view_of(rel, *mtime, now_unix_ms());
  if (!v.visible) throw BackendError(str("sim: ", rel, " not found (not yet visible to ", viewer_, ")"));
  if (v.placeholder) {
    write_file_atomic(local_path, "");  // a placeholder's content is nothing yet
    return;
  }
  uint64_t attempt;
  {
    std::lock_guard lock(mutex_);
    attempt = download_attempts_[rel]++;
  }
  uint64_t size = copy_file_bytes(source, local_path);
  throttle(size);
  if (size == 0) return;
  std::lock_guard lock(mutex_);
  if (uniform(rel, attempt, "truncate") < options_.truncate_prob) {
    uint64_t keep = static_cast<uint64_t>(uniform(rel, attempt, "truncate_at") * static_cast<double>(size));
    fs::resize_file(local_path, keep);
    record("truncate", rel, str("attempt ", attempt, ": ", keep, " of ", size, " bytes"));
  } else if (uniform(rel, attempt, "corrupt") < options_.corrupt_prob) {
    uint64_t at = static_cast<uint64_t>(uniform(rel, attempt, "corrupt_at") * static_cast<double>(size));
    std::string bytes = read_file(local_path);
    bytes[at] = static_cast<char>(bytes[at] ^ 0x20);
    write_file_atomic(local_path, bytes);
    record("corrupt", rel, str("attempt ", attempt, ": flipped byte ", at, " of ", size));
  }
}

void SimBackend::upload(const fs::path& local_path, const std::string& rel, UploadMode mode) {
  std::error_code ec;
  throttle(fs::file_size(local_path, ec));
  truth_.upload(local_path, rel, mode);
}

void SimBackend::remove(const std::string& rel) { truth_.remove(rel); }
void SimBackend::remove_empty_dirs(const std::string& rel_dir) { truth_.remove_empty_dirs(rel_dir); }

std::map<std::string, uint64_t> SimBackend::fault_counts() const {
  std::lock_guard lock(mutex_);
  return faults_;
}

}  // namespace gradbox::syncer
