#include "exchange/membership.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <vector>

#include "wire/envelope.h"

namespace gradbox::exchange {
namespace {

namespace fs = std::filesystem;

double median_of(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  return n % 2 ? values[n / 2] : 0.5 * (values[n / 2 - 1] + values[n / 2]);
}

}  // namespace

LagDeadline::LagDeadline(double floor_s, double ceiling_s, double k, size_t min_samples, size_t window)
    : floor_s_(std::min(floor_s, ceiling_s)), ceiling_s_(ceiling_s), k_(k), min_samples_(min_samples), window_(window) {}

void LagDeadline::observe(double lag_s) {
  lags_.push_back(lag_s);
  if (lags_.size() > window_) lags_.pop_front();
}

double LagDeadline::deadline() const {
  if (lags_.empty() || lags_.size() < min_samples_) return ceiling_s_;
  const std::vector<double> lags(lags_.begin(), lags_.end());
  const double median = median_of(lags);
  std::vector<double> deviations;
  deviations.reserve(lags.size());
  for (double lag : lags) deviations.push_back(std::abs(lag - median));
  const double spread = 1.4826 * median_of(deviations);  // MAD, scaled to a normal's sigma
  return std::clamp(median + k_ * spread, floor_s_, ceiling_s_);
}

std::map<std::string, PeerBeat> read_peer_heartbeats(const fs::path& inbox, const std::string& run_id,
                                                     const std::string& self) {
  std::map<std::string, PeerBeat> beats;
  const int64_t now = std::chrono::duration_cast<std::chrono::milliseconds>(
                          std::chrono::system_clock::now().time_since_epoch()).count();
  std::error_code ec;
  for (fs::directory_iterator w(inbox / "members", ec), end; !ec && w != end; w.increment(ec)) {
    const std::string worker = w->path().filename().string();
    if (worker == self) continue;
    std::vector<std::string> names;
    std::error_code wec;
    for (fs::directory_iterator f(w->path(), wec); !wec && f != fs::directory_iterator(); f.increment(wec)) {
      const std::string name = f->path().filename().string();
      if (name.starts_with("hb-") && name.ends_with(".gbx.flag")) names.push_back(name.substr(0, name.size() - 5));
    }
    std::sort(names.begin(), names.end());  // fixed-width sequence: newest last
    for (auto it = names.rbegin(); it != names.rend(); ++it) {
      try {
        wire::WireFile file = wire::read_wire_file(w->path() / *it);
        if (file.header.run_id() != run_id || !file.header.has_heartbeat()) continue;
        const wire::Heartbeat& hb = file.header.heartbeat();
        beats[worker] = PeerBeat{hb.state(), hb.applied_round(),
                                 static_cast<double>(now - file.header.created_unix_ms()) / 1000.0};
        break;
      } catch (const std::exception&) {
        continue;  // verified by the syncer; only a concurrent cleanup gets here
      }
    }
    for (size_t i = 0; i + 1 < names.size(); ++i) {
      fs::remove(w->path() / names[i], wec);
      fs::remove(w->path() / (names[i] + ".flag"), wec);
    }
  }
  return beats;
}

}  // namespace gradbox::exchange
