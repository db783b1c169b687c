#include "mirror/memory_mirror.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "common/error.h"
#include "mirror/sync_contract.h"

namespace gradbox::mirror {
namespace {

constexpr double kZ90 = 1.2815515655446004;  // the standard normal's 90th percentile

std::string norm_dir(const std::string& dir) {
  std::string d = dir;
  while (!d.empty() && d.back() == '/') d.pop_back();
  return d;
}

// "a/b/c" -> {"a/b", "c"}; "c" -> {"", "c"}.
std::pair<std::string, std::string> split(const std::string& rel) {
  const size_t slash = rel.rfind('/');
  if (slash == std::string::npos) return {"", rel};
  return {rel.substr(0, slash), rel.substr(slash + 1)};
}

std::string join(const std::string& dir, const std::string& name) { return dir.empty() ? name : dir + "/" + name; }

// Calls fn(rel, file) for the file rel and for every file under the folder rel (everything when
// rel is ""), and erases them from tree (dir -> name -> file).
template <class Tree, class Fn>
void take_subtree(Tree& tree, const std::string& rel, Fn&& fn) {
  const std::string folder = norm_dir(rel);
  auto take_dir = [&](typename Tree::iterator d) {
    for (auto& [name, file] : d->second) fn(join(d->first, name), file);
    return tree.erase(d);
  };
  if (folder.empty()) {
    for (auto d = tree.begin(); d != tree.end();) d = take_dir(d);
    return;
  }
  const auto [dir, name] = split(folder);
  if (auto d = tree.find(dir); d != tree.end()) {
    if (auto f = d->second.find(name); f != d->second.end()) {
      fn(folder, f->second);
      d->second.erase(f);
      if (d->second.empty()) tree.erase(d);
    }
  }
  if (auto d = tree.find(folder); d != tree.end()) take_dir(d);
  const std::string prefix = folder + "/";
  for (auto d = tree.lower_bound(prefix); d != tree.end() && d->first.starts_with(prefix);) d = take_dir(d);
}

}  // namespace

// --- MemoryMirror ---

MemoryMirror::MemoryMirror(SimFolder& folder, std::string name, int index, double created_s)
    : folder_(folder), name_(std::move(name)), index_(index), created_s_(created_s) {}

MemoryMirror::OutFile* MemoryMirror::find_published(const std::string& rel) {
  const auto [dir, name] = split(rel);
  auto d = outbox_.find(dir);
  if (d == outbox_.end()) return nullptr;
  auto f = d->second.find(name);
  return f == d->second.end() ? nullptr : &f->second;
}

void MemoryMirror::count_dirs(const std::string& rel, int delta) {
  std::string parent;
  size_t start = 0;
  for (size_t slash = rel.find('/'); slash != std::string::npos; slash = rel.find('/', start)) {
    auto& kids = children_[parent];
    const std::string child = rel.substr(start, slash - start);
    if ((kids[child] += delta) <= 0) kids.erase(child);
    if (kids.empty()) children_.erase(parent);
    parent = rel.substr(0, slash);
    start = slash + 1;
  }
}

void MemoryMirror::add_arrival(const std::string& rel, InFile file) {
  const auto [dir, name] = split(rel);
  auto& files = inbox_[dir];
  if (!files.contains(name)) count_dirs(rel, +1);
  files[name] = std::move(file);
}

void MemoryMirror::publish(const std::string& rel, std::string_view bytes) {
  folder_.advance();
  GB_CHECK(!rel.empty() && rel.back() != '/', "publish of a folder name: '", rel, "'");
  GB_CHECK(!find_published(rel), where(rel), ": already published (files in the shared folder are written once)");
  const auto [dir, name] = split(rel);
  const uint64_t generation = ++folder_.next_id_;
  outbox_[dir].emplace(name, OutFile{std::string(bytes), generation, false, 0});
  count_dirs(rel, +1);
  own_.insert(rel);
  double when = folder_.sim_.now_s() + folder_.faults_.upload_s;
  if (folder_.faults_.upload_bytes_per_s > 0 && is_checkpoint_part(rel)) {
    waiting_parts_.emplace_back(rel, generation);  // background traffic (Note [Upload order])
    if (!part_tick_pending_) {
      part_tick_pending_ = true;
      folder_.push(std::max(folder_.sim_.now_s(), upload_free_s_), SimFolder::Kind::next_part, index_, "", 0);
    }
    return;
  }
  if (folder_.faults_.upload_bytes_per_s > 0) {
    when = std::max(when, upload_free_s_ + folder_.faults_.upload_s) +
           folder_.transfer_s(rel, bytes.size(), folder_.faults_.upload_bytes_per_s);
    upload_free_s_ = when;
  }
  folder_.push(when, SimFolder::Kind::upload, index_, rel, generation);
}

bool MemoryMirror::published(const std::string& rel) {
  folder_.advance();
  return find_published(rel) != nullptr;
}

std::optional<std::string> MemoryMirror::read_published(const std::string& rel) {
  folder_.advance();
  const OutFile* f = find_published(rel);
  if (!f) return std::nullopt;
  return f->bytes;
}

std::vector<std::string> MemoryMirror::list_published(const std::string& dir) {
  folder_.advance();
  std::vector<std::string> names;
  if (auto d = outbox_.find(norm_dir(dir)); d != outbox_.end())
    for (const auto& [name, file] : d->second) names.push_back(name);
  return names;
}

bool MemoryMirror::landed(const std::string& rel) {
  folder_.advance();
  const OutFile* f = find_published(rel);
  return f && f->landed;
}

void MemoryMirror::withdraw(const std::string& rel) {
  folder_.advance();
  const double when = folder_.sim_.now_s() + folder_.faults_.upload_s;
  take_subtree(outbox_, rel, [&](const std::string& file_rel, const OutFile& f) {
    count_dirs(file_rel, -1);
    // Not landed: its pending upload finds the outbox entry gone and never happens.
    if (f.landed) folder_.push(when, SimFolder::Kind::remove, index_, file_rel, f.shared_id);
  });
}

std::vector<Arrival> MemoryMirror::list(const std::string& dir) {
  folder_.advance();
  std::vector<Arrival> files;
  if (auto d = inbox_.find(norm_dir(dir)); d != inbox_.end())
    for (const auto& [name, file] : d->second) files.push_back({name, file.arrived_unix_ms});
  return files;
}

std::vector<std::string> MemoryMirror::list_dirs(const std::string& dir) {
  folder_.advance();
  std::vector<std::string> names;
  if (auto d = children_.find(norm_dir(dir)); d != children_.end())
    for (const auto& [name, count] : d->second) names.push_back(name);
  return names;
}

std::optional<std::string> MemoryMirror::read(const std::string& rel) {
  folder_.advance();
  const auto [dir, name] = split(rel);
  auto d = inbox_.find(dir);
  if (d == inbox_.end()) return std::nullopt;
  auto f = d->second.find(name);
  if (f == d->second.end()) return std::nullopt;
  return f->second.bytes;
}

void MemoryMirror::request(const std::string& rel) {
  folder_.advance();
  requests_.insert(rel);
  // rel names a file or a prefix of file names in its folder (sync_contract.h).
  const size_t dir_end = rel.rfind('/') == std::string::npos ? 0 : rel.rfind('/') + 1;
  for (auto s = folder_.shared_.lower_bound(rel); s != folder_.shared_.end() && s->first.starts_with(rel); ++s)
    if (s->first.find('/', dir_end) == std::string::npos)
      folder_.schedule_delivery(*this, s->first, s->second.id, s->second.landed_s, folder_.sim_.now_s());
}

bool MemoryMirror::requested(const std::string& rel) const {
  if (requests_.contains(rel)) return true;
  const auto [dir, name] = split(rel);
  const std::string folder = dir.empty() ? "" : dir + "/";
  for (auto r = requests_.lower_bound(folder); r != requests_.end() && r->starts_with(folder); ++r) {
    const std::string_view prefix = std::string_view(*r).substr(folder.size());
    if (prefix.find('/') == std::string_view::npos && name.starts_with(prefix)) return true;
  }
  return false;
}

void MemoryMirror::forget(const std::string& rel) {
  folder_.advance();
  take_subtree(inbox_, rel, [&](const std::string& file_rel, const InFile&) { count_dirs(file_rel, -1); });
  const std::string folder = norm_dir(rel);
  if (folder.empty()) {
    requests_.clear();
    return;
  }
  requests_.erase(folder);
  const std::string prefix = folder + "/";
  for (auto r = requests_.lower_bound(prefix); r != requests_.end() && r->starts_with(prefix);) r = requests_.erase(r);
}

std::optional<std::string> MemoryMirror::control() {
  folder_.advance();
  return control_;
}

double MemoryMirror::live_seconds(double now_s) const {
  double live = now_s - created_s_;
  for (const auto& [from, to] : outages_) live -= std::max(0.0, std::min(to, now_s) - std::max(from, created_s_));
  return live;
}

uint64_t MemoryMirror::settled_passes() {
  folder_.advance();
  const double live = live_seconds(folder_.sim_.now_s());
  return live <= 0 ? 0 : static_cast<uint64_t>(std::floor(live / folder_.faults_.pass_s + 1e-9));
}

std::string MemoryMirror::where(const std::string& rel) const { return "mem://" + name_ + "/" + rel; }

// --- SimFolder ---

SimFolder::SimFolder(Simulation& sim, uint64_t seed, FolderFaults faults)
    : sim_(sim), faults_(std::move(faults)), rng_(seed) {
  GB_CHECK(faults_.pass_s > 0, "pass_s must be positive, got ", faults_.pass_s);
  GB_CHECK(faults_.upload_s >= 0 && faults_.lag_median_s >= 0, "negative upload_s ", faults_.upload_s,
           " or lag_median_s ", faults_.lag_median_s);
  GB_CHECK(faults_.lost_listing >= 0 && faults_.lost_listing < 1 && faults_.partial >= 0 && faults_.partial <= 1,
           "fault probabilities out of range: lost_listing ", faults_.lost_listing, ", partial ", faults_.partial);
}

SimFolder::~SimFolder() = default;

MemoryMirror& SimFolder::disk(const std::string& disk_name) {
  if (auto it = disk_index_.find(disk_name); it != disk_index_.end()) return *disks_[it->second];
  advance();
  const int index = static_cast<int>(disks_.size());
  const double now = sim_.now_s();
  disks_.push_back(std::unique_ptr<MemoryMirror>(new MemoryMirror(*this, disk_name, index, now)));
  disk_index_.emplace(disk_name, index);
  MemoryMirror& d = *disks_.back();
  // A new syncer's first listing finds what the folder already holds.
  for (const auto& [rel, file] : shared_) schedule_delivery(d, rel, file.id, file.landed_s, now);
  if (control_version_ > 0) push(now + lag(), Kind::control, index, control_text_, control_version_);
  return d;
}

void SimFolder::outage(const std::string& disk_name, double from_s, double to_s) {
  MemoryMirror& d = disk(disk_name);
  advance();
  from_s = std::max(from_s, sim_.now_s());  // the past already happened
  if (to_s <= from_s) return;
  auto& spans = d.outages_;
  spans.emplace_back(from_s, to_s);
  std::sort(spans.begin(), spans.end());
  std::vector<std::pair<double, double>> merged;
  for (const auto& span : spans) {
    if (!merged.empty() && span.first <= merged.back().second) merged.back().second = std::max(merged.back().second, span.second);
    else merged.push_back(span);
  }
  spans = std::move(merged);
}

void SimFolder::inject(const std::string& rel, std::string bytes) {
  advance();
  GB_CHECK(!rel.empty() && rel.back() != '/', "inject of a folder name: '", rel, "'");
  if (auto it = shared_.find(rel); it != shared_.end()) {
    if (it->second.bytes != bytes) ++counters_.conflicts;
    return;
  }
  const uint64_t id = ++next_id_;
  shared_.emplace(rel, SharedFile{std::move(bytes), id, -1, sim_.now_s()});
  deliver_everywhere(rel, id, -1, sim_.now_s());
}

void SimFolder::set_control(std::string text) {
  advance();
  control_text_ = std::move(text);
  ++control_version_;
  for (const auto& d : disks_) push(sim_.now_s() + lag(), Kind::control, d->index_, control_text_, control_version_);
}

const FolderCounters& SimFolder::counters() const {
  advance();
  return counters_;
}

std::optional<std::string> SimFolder::shared_file(const std::string& rel) const {
  advance();
  auto it = shared_.find(rel);
  if (it == shared_.end()) return std::nullopt;
  return it->second.bytes;
}

void SimFolder::advance() const {
  const double now = sim_.now_s();
  while (!queue_.empty() && queue_.top().t <= now) {
    const Event e = queue_.top();
    queue_.pop();
    fire(e);
  }
}

void SimFolder::push(double t, Kind kind, int disk, std::string rel, uint64_t id, int attempt, bool downloaded) const {
  queue_.push(Event{t, ++seq_, kind, disk, std::move(rel), id, attempt, downloaded});
}

uint64_t SimFolder::nominal(const std::string& rel, uint64_t bytes) const {
  return faults_.nominal_bytes ? faults_.nominal_bytes(rel, bytes) : bytes;
}

double SimFolder::transfer_s(const std::string& rel, uint64_t bytes, double bytes_per_s) const {
  if (bytes_per_s <= 0) return 0;
  return static_cast<double>(nominal(rel, bytes)) / bytes_per_s;
}

void SimFolder::fire(const Event& e) const {
  MemoryMirror& d = *disks_[e.disk];
  switch (e.kind) {
    case Kind::upload: fire_upload(e); return;
    case Kind::next_part: fire_next_part(e); return;
    case Kind::deliver: fire_deliver(e); return;
    case Kind::remove:
      if (in_outage(d, e.t)) return push(outage_end(d, e.t) + faults_.upload_s, e.kind, e.disk, e.rel, e.id);
      // Only the copy this disk uploaded: a later file under the name is someone else's.
      if (auto it = shared_.find(e.rel); it != shared_.end() && it->second.id == e.id) shared_.erase(it);
      return;
    case Kind::control:
      if (in_outage(d, e.t)) return push(outage_end(d, e.t) + lag(), e.kind, e.disk, e.rel, e.id);
      if (e.id > d.control_version_) {  // never an older edit over a newer one
        d.control_ = e.rel;
        d.control_version_ = e.id;
      }
      return;
  }
}

void SimFolder::fire_next_part(const Event& e) const {
  MemoryMirror& d = *disks_[e.disk];
  if (d.upload_free_s_ > e.t) return push(d.upload_free_s_, e.kind, e.disk, "", 0);  // other files first
  while (!d.waiting_parts_.empty()) {
    auto [rel, generation] = std::move(d.waiting_parts_.front());
    d.waiting_parts_.pop_front();
    const MemoryMirror::OutFile* f = d.find_published(rel);
    if (!f || f->generation != generation) continue;  // withdrawn before it went up
    const double when = e.t + faults_.upload_s + transfer_s(rel, f->bytes.size(), faults_.upload_bytes_per_s);
    d.upload_free_s_ = when;
    push(when, Kind::upload, e.disk, rel, generation);
    return push(when, Kind::next_part, e.disk, "", 0);
  }
  d.part_tick_pending_ = false;
}

void SimFolder::fire_upload(const Event& e) const {
  MemoryMirror& d = *disks_[e.disk];
  MemoryMirror::OutFile* f = d.find_published(e.rel);
  if (!f || f->generation != e.id) return;  // withdrawn before it went up
  if (in_outage(d, e.t)) return push(outage_end(d, e.t) + faults_.upload_s, e.kind, e.disk, e.rel, e.id);
  auto it = shared_.find(e.rel);
  if (it == shared_.end()) {
    const uint64_t id = ++next_id_;
    shared_.emplace(e.rel, SharedFile{f->bytes, id, e.disk, e.t});
    f->landed = true;
    f->shared_id = id;
    ++counters_.landed;
    d.uploaded_bytes_[e.rel.substr(0, e.rel.find('/'))] += nominal(e.rel, f->bytes.size());
    deliver_everywhere(e.rel, id, e.disk, e.t);
  } else if (it->second.bytes == f->bytes) {
    f->landed = true;  // the real syncer marks it sent: the folder holds exactly our bytes
    f->shared_id = it->second.id;
    ++counters_.landed;
  } else {
    ++counters_.conflicts;  // write-once: never uploaded, never retried
  }
}

void SimFolder::fire_deliver(const Event& e) const {
  MemoryMirror& d = *disks_[e.disk];
  auto unschedule = [&] {
    if (auto s = d.scheduled_.find(e.rel); s != d.scheduled_.end() && s->second == e.id) d.scheduled_.erase(s);
  };
  auto it = shared_.find(e.rel);
  if (it == shared_.end() || it->second.id != e.id || d.own_.contains(e.rel) || d.done_.contains(e.rel) ||
      (on_demand(e.rel) && !d.requested(e.rel)))
    return unschedule();  // deleted, replaced, published here meanwhile, or no longer wanted
  if (in_outage(d, e.t)) return push(outage_end(d, e.t) + lag(), e.kind, e.disk, e.rel, e.id, e.attempt, e.downloaded);
  if (e.downloaded) return arrive(d, e, it->second);
  // A retry comes at the syncer's next pass at the earliest (also keeps lag 0 from spinning).
  if (e.attempt == 0 && faults_.partial > 0 && uniform() < faults_.partial) {
    ++counters_.partial_copies;
    return push(e.t + std::max(lag(), faults_.pass_s), e.kind, e.disk, e.rel, e.id, e.attempt + 1);
  }
  if (faults_.lost_listing > 0 && uniform() < faults_.lost_listing) {
    ++counters_.lost_listings;
    return push(e.t + std::max(lag(), faults_.pass_s), e.kind, e.disk, e.rel, e.id, e.attempt + 1);
  }
  if (faults_.download_bytes_per_s > 0) {
    // Seen whole in the listing: now it comes down the disk's link, after what is queued there.
    d.download_free_s_ = std::max(d.download_free_s_, e.t) +
                         transfer_s(e.rel, it->second.bytes.size(), faults_.download_bytes_per_s);
    return push(d.download_free_s_, e.kind, e.disk, e.rel, e.id, e.attempt, true);
  }
  arrive(d, e, it->second);
}

void SimFolder::arrive(MemoryMirror& d, const Event& e, const SharedFile& file) const {
  d.add_arrival(e.rel, {file.bytes, sim_.unix_ms_at(e.t)});
  d.done_.insert(e.rel);
  if (auto s = d.scheduled_.find(e.rel); s != d.scheduled_.end() && s->second == e.id) d.scheduled_.erase(s);
  ++counters_.deliveries;
}

void SimFolder::deliver_everywhere(const std::string& rel, uint64_t id, int owner, double t) const {
  for (const auto& d : disks_)
    if (d->index_ != owner) schedule_delivery(*d, rel, id, t, t);
}

void SimFolder::schedule_delivery(MemoryMirror& d, const std::string& rel, uint64_t id, double landed_s,
                                  double not_before_s) const {
  if (d.own_.contains(rel) || d.done_.contains(rel)) return;
  if (on_demand(rel) && !d.requested(rel)) return;  // request() schedules it
  auto [s, fresh] = d.scheduled_.try_emplace(rel, id);
  if (!fresh) {
    if (s->second == id) return;  // already on its way
    s->second = id;               // a new file under a deleted name; the old event drops itself
  }
  push(std::max(not_before_s, landed_s + lag()), Kind::deliver, d.index_, rel, id);
}

bool SimFolder::on_demand(const std::string& rel) const {
  const std::string_view name = std::string_view(rel).substr(rel.rfind('/') + 1);  // npos + 1 == 0
  return std::any_of(faults_.on_demand_prefixes.begin(), faults_.on_demand_prefixes.end(),
                     [&](const std::string& p) { return name.starts_with(p); });
}

bool SimFolder::in_outage(const MemoryMirror& d, double t) const {
  return std::any_of(d.outages_.begin(), d.outages_.end(), [&](const auto& s) { return s.first <= t && t < s.second; });
}

double SimFolder::outage_end(const MemoryMirror& d, double t) const {
  for (const auto& [from, to] : d.outages_)
    if (from <= t && t < to) return to;  // merged spans: the end is outside every outage
  return t;
}

double SimFolder::uniform() const { return static_cast<double>(rng_() >> 11) * 0x1.0p-53; }

// Log-normal fitted to the median and p90, sampled by Box-Muller from our own generator (the
// std:: distributions differ across standard libraries); the tail is capped at 10x p90.
double SimFolder::lag() const {
  const double median = faults_.lag_median_s;
  if (median <= 0) return 0;
  const double p90 = std::max(faults_.lag_p90_s, median);
  const double sigma = std::log(p90 / median) / kZ90;
  if (sigma <= 0) return median;
  const double u1 = 1.0 - uniform(), u2 = uniform();
  const double z = std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
  return std::min(median * std::exp(sigma * z), 10 * p90);
}

}  // namespace gradbox::mirror
