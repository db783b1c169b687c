#include "exchange/membership.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "common/error.h"
#include "exchange/exchange_context.h"
#include "exchange/folder_names.h"

namespace gradbox::exchange {
namespace {

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
  cached_.reset();
}

double LagDeadline::deadline() const {
  if (lags_.empty() || lags_.size() < min_samples_) return ceiling_s_;
  if (cached_) return *cached_;
  const std::vector<double> lags(lags_.begin(), lags_.end());
  const double median = median_of(lags);
  std::vector<double> deviations;
  deviations.reserve(lags.size());
  for (double lag : lags) deviations.push_back(std::abs(lag - median));
  const double spread = 1.4826 * median_of(deviations);  // MAD, scaled to a normal's sigma
  cached_ = std::clamp(median + k_ * spread, floor_s_, ceiling_s_);
  return *cached_;
}

Heartbeats::Heartbeats(ExchangeContext& context) : context_(context) {}

void Heartbeats::refresh() {
  peers_.clear();
  namesake_.reset();
  const int64_t now = context_.clock.unix_ms();
  for (const std::string& worker : context_.mirror.list_dirs(kMembersDir)) {
    const std::string dir = str(kMembersDir, "/", worker);
    // Newest first by arrival; names sort by the writer's time, which is only a tie-break.
    std::vector<mirror::Arrival> files = context_.mirror.list(dir);
    std::erase_if(files, [](const mirror::Arrival& a) { return !is_heartbeat_name(a.name); });
    std::sort(files.begin(), files.end(), [](const mirror::Arrival& a, const mirror::Arrival& b) {
      return a.arrived_unix_ms != b.arrived_unix_ms ? a.arrived_unix_ms > b.arrived_unix_ms : a.name > b.name;
    });
    bool found = false;
    for (const mirror::Arrival& file : files) {
      const std::string rel = dir + "/" + file.name;
      if (found) {
        context_.mirror.forget(rel);  // superseded
        continue;
      }
      auto known = newest_read_.find(worker);
      if (known == newest_read_.end() || known->second.rel != rel) {
        std::optional<wire::WireFile> wf = context_.read_checked(rel);
        if (!wf || !wf->header.has_heartbeat()) continue;
        const wire::Heartbeat& hb = wf->header.heartbeat();
        if (hb.worker() != worker) {
          context_.reject(rel, str(rel, ": a heartbeat of ", hb.worker(), " in the folder of ", worker));
          continue;
        }
        known = newest_read_.insert_or_assign(
            worker, ReadBeat{rel, PeerBeat{hb.state(), hb.applied_round(), 0, hb.incarnation(), hb.started_unix_ms()}}).first;
      }
      found = true;
      PeerBeat beat = known->second.beat;
      beat.age_s = std::max(0.0, static_cast<double>(now - file.arrived_unix_ms) / 1000.0);
      if (worker == context_.config.worker) {
        if (beat.incarnation != context_.incarnation.id()) namesake_ = beat;
      } else {
        peers_[worker] = beat;
      }
    }
  }
}

bool Heartbeats::fresh(const PeerBeat& beat) const { return beat.age_s < context_.config.stale_after_s; }

bool Heartbeats::anyone_live() const {
  for (const auto& [worker, beat] : peers_)
    if (beat.state == "live" && fresh(beat)) return true;
  return false;
}

void Heartbeats::publish(const std::string& state, const Progress& progress) {
  const ExchangeContext& c = context_;
  const std::string& self = c.config.worker;
  if (!withdrew_earlier_lives_) {  // an earlier life's last heartbeat is stale by definition
    withdrew_earlier_lives_ = true;
    for (const std::string& name : c.mirror.list_published(str(kMembersDir, "/", self)))
      context_.mirror.withdraw(str(kMembersDir, "/", self, "/", name));
  }
  wire::FileHeader header = context_.new_header();
  wire::Heartbeat* hb = header.mutable_heartbeat();
  hb->set_worker(self);
  const int64_t sequence = std::max<int64_t>(header.created_unix_ms(), last_sequence_ + 1);
  hb->set_sequence(static_cast<uint64_t>(sequence));
  hb->set_applied_round(progress.applied_round);
  hb->set_step(progress.step > 0 ? progress.step : progress.applied_round);
  hb->set_state(state);
  hb->set_tokens_per_second(progress.tokens_per_second);
  hb->set_last_loss(progress.last_loss);
  hb->set_bytes_uploaded(context_.stats.bytes_written);
  hb->set_bytes_uploaded_24h(context_.bytes_published_last_day());
  hb->set_tokens(progress.tokens);
  hb->set_incarnation(c.incarnation.id());
  hb->set_started_unix_ms(c.incarnation.started_unix_ms());
  hb->set_files_rejected(context_.stats.rejected_files);
  hb->set_unsigned_or_forged_files(context_.stats.unsigned_or_forged_files);
  const std::string name = heartbeat_name(self, sequence, c.incarnation.token(str("hb/", sequence)));
  context_.publish(name, context_.frame(name, header));
  if (!last_name_.empty()) context_.mirror.withdraw(last_name_);
  last_name_ = name;
  last_sequence_ = sequence;
  last_published_s_ = context_.clock.now_s();
  last_state_ = state;
}

double Heartbeats::seconds_since_publish() const { return context_.clock.now_s() - last_published_s_; }

}  // namespace gradbox::exchange
