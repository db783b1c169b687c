// The folder exchange end to end on a real gradient (a benchmark, not a test; run by
// scripts/bench/exchange_bench.sh):
//
//   exchange_bench --grad FILE [--workers 3] [--rounds 5] [--warmup N] [--dir /tmp/gradbox_exchange_bench]
//                  [--patterns all-gather,sharded] [--codecs fp32,fp16,bf16,int8,int4]
//                  [--poll-ms 500] [--no-wake] [--gc-window 2] [--context-repeats 3] [--keep]
//                  [--log-level warn] [--signed] [--max-norm-ratio 10]
//
// FILE holds a flat fp32 gradient as `codec_bench --dump` writes it (u64 n, then n floats).
// N workers run in this one process, each a FolderExchange in its own thread, each paired with
// the real syncer engine (syncer::Syncer over a MountedBackend on one shared local directory,
// driven by its own thread calling run_pass() whenever the kernel reports a change under its
// folders and at least every --poll-ms, as gradbox-sync does (Note [Waking on changes]; --no-wake:
// every --poll-ms only, the old syncer); with on_demand_prefix "g-", as `gradbox train` starts
// gradbox-sync). Worker w's gradient in round
// r is the loaded one scaled by (1 + 0.01 w)(1 + 0.001 r), so every file differs.
//
// Per configuration (pattern x codec, codec::default_options, threads = 1) it runs --warmup
// rounds, then --rounds rounds, all workers starting each round together (a barrier stands for
// "every gradient is ready"). Only the last --rounds count: a run's first rounds size its
// buffers and have no withdrawn files to write over yet (Note [Recycled files]), so the default
// warm-up is --gc-window + 2 rounds, the first whose files reuse a withdrawn round's. It prints
//   - the all_reduce wall time (encode, write, sync, wait for peers, decode and reduce, local
//     garbage collection): median, min and max over all worker-rounds, and the median over
//     rounds of the slowest worker;
//   - bytes uploaded and downloaded per worker per round (syncer stats bytes_uploaded /
//     bytes_downloaded over workers x rounds), in MB, as a multiple of one fp32 gradient and of
//     one encoded gradient (the loaded gradient encoded whole), next to what the pattern should
//     cost: all-gather uploads 1 and downloads N-1 encoded gradients; sharded uploads (N+1)/N
//     (its contribution plus its reduced shard) and downloads 2(N-1)/N (the others'
//     contributions to its shard plus the others' reduced shards). The mounted backend writes
//     the final name directly, so a peer listing the folder mid-upload sees a file still
//     arriving: the syncer reads its preamble and header first and copies it only once its
//     declared length is there; those looks count in its download counter, and their number is
//     printed ('part'). The bytes of the round's finished files (this worker's outbox, its
//     flagged inbox files) are printed beside the counters;
//   - the relative L2 error of the agreed average against the exact fp32 average;
//   - beside the all_reduce time, the same round's codec work alone (run_codec_round: N threads
//     at once doing exactly the encodes and decodes a round does, no files) and the ratio of the
//     two, the exchange's overhead over what its bytes cost (target <= 1.5x); and the CPU
//     seconds per round of the workers' all_reduce calls and the syncer threads (user and
//     system: the page cache's copies count) beside the codec work's.
// Before that, encode-only, decode-only and error-feedback encode time of the whole gradient
// per codec, for context. Checks (checksums, the exact average) run between barriers, outside
// the timed calls.
//
// Correctness: every replica's averaged gradient must be bit-identical each round (checksums
// compared), every round must have all N contributors, and fp32 must reproduce the exact
// average; otherwise it says so and exits 1.
#include <sys/statvfs.h>
#include <time.h>

#include <algorithm>
#include <atomic>
#include <barrier>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "codec/codec.h"
#include "common/checksum.h"
#include "common/kept_heap.h"
#include "common/log.h"
#include "exchange/folder_exchange.h"
#include "exchange/round_agreement.h"  // shard_range
#include "syncer/change_watch.h"
#include "syncer/mounted_backend.h"
#include "syncer/syncer.h"

namespace {

namespace fs = std::filesystem;
using namespace gradbox;
using Clock = std::chrono::steady_clock;

struct Options {
  std::string grad;
  int workers = 3;
  int rounds = 5;
  int warmup = -1;  // --gc-window + 2
  std::string dir = "/tmp/gradbox_exchange_bench";
  std::vector<std::string> patterns{"all-gather", "sharded"};
  std::vector<std::string> codecs{"fp32", "fp16", "bf16", "int8", "int4"};
  int poll_ms = 500;  // gradbox-sync's default
  bool wake = true;   // Note [Waking on changes]
  int gc_window = 2;
  int context_repeats = 3;
  bool keep = false;
  std::string log_level = "warn";
  // Every file MAC'd and member-signed (Note [Signed files], Note [Member signatures]).
  bool signed_run = false;
  // The owners' norm check (Note [Checked contributions]); 0: only the finiteness check.
  double max_norm_ratio = exchange::FolderExchangeConfig{}.max_norm_ratio;
};

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  for (std::string item; std::getline(ss, item, ',');)
    if (!item.empty()) out.push_back(item);
  return out;
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw std::runtime_error(a + " needs a value");
      return argv[++i];
    };
    if (a == "--grad") o.grad = value();
    else if (a == "--workers") o.workers = std::stoi(value());
    else if (a == "--rounds") o.rounds = std::stoi(value());
    else if (a == "--warmup") o.warmup = std::stoi(value());
    else if (a == "--dir") o.dir = value();
    else if (a == "--patterns") o.patterns = split(value());
    else if (a == "--codecs") o.codecs = split(value());
    else if (a == "--poll-ms") o.poll_ms = std::stoi(value());
    else if (a == "--no-wake") o.wake = false;
    else if (a == "--gc-window") o.gc_window = std::stoi(value());
    else if (a == "--context-repeats") o.context_repeats = std::stoi(value());
    else if (a == "--keep") o.keep = true;
    else if (a == "--log-level") o.log_level = value();
    else if (a == "--signed") o.signed_run = true;
    else if (a == "--max-norm-ratio") o.max_norm_ratio = std::stod(value());
    else throw std::runtime_error("unknown option " + a);
  }
  if (o.grad.empty()) throw std::runtime_error("--grad FILE is required (codec_bench --dump FILE writes one)");
  if (o.warmup < 0) o.warmup = o.gc_window + 2;
  if (o.workers < 2 || o.rounds < 1 || o.context_repeats < 1 || o.poll_ms < 0)
    throw std::runtime_error("--workers >= 2, --rounds >= 1, --context-repeats >= 1, --poll-ms >= 0");
  return o;
}

std::vector<float> load_gradient(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot open " + path);
  uint64_t n = 0;
  in.read(reinterpret_cast<char*>(&n), sizeof n);
  if (!in || n == 0 || n > (uint64_t{1} << 34)) throw std::runtime_error(path + ": bad element count");
  const uint64_t expected = 8 + 4 * n;
  if (fs::file_size(path) != expected)
    throw std::runtime_error(path + ": " + std::to_string(fs::file_size(path)) + " bytes, expected " +
                             std::to_string(expected));
  std::vector<float> g(n);
  in.read(reinterpret_cast<char*>(g.data()), static_cast<std::streamsize>(4 * n));
  if (!in) throw std::runtime_error(path + ": short read");
  return g;
}

double seconds(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }

// CPU seconds (user and system) of the calling thread so far: the kernel's page-cache work on
// a thread's writes and copies is charged to it.
double thread_cpu_seconds() {
  timespec ts{};
  ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t m = v.size() / 2;
  return v.size() % 2 ? v[m] : 0.5 * (v[m - 1] + v[m]);
}

float scale_of(int worker, uint64_t round) { return (1.0f + 0.01f * worker) * (1.0f + 0.001f * round); }

std::string worker_name(int w) { return "w" + std::to_string(w); }

// Bytes of the finished files of one round folder: *.flag-ged ones (an inbox) or all but the
// markers (an outbox).
uint64_t round_bytes(const fs::path& dir, bool flagged_only) {
  uint64_t total = 0;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.ends_with(".flag") || name.ends_with(".sent") || name.find(".tmp") != std::string::npos) continue;
    if (flagged_only && !fs::exists(it->path().string() + ".flag")) continue;
    std::error_code sec;
    const uint64_t size = fs::file_size(it->path(), sec);
    if (!sec) total += size;
  }
  return total;
}

double free_gb(const fs::path& dir) {
  struct statvfs s {};
  if (::statvfs(dir.c_str(), &s) != 0) return -1;
  return static_cast<double>(s.f_bavail) * s.f_frsize / 1e9;
}

struct CodecContext {
  size_t encoded_bytes = 0;
  double encode_s = 0;
  double ef_encode_s = 0;  // ErrorFeedbackEncoder::encode, what the exchange calls
  double decode_s = 0;
};

struct CodecRound {  // run_codec_round's result
  double med_s = 0, med_slowest_s = 0;
  double cpu_s = 0;  // CPU seconds per round, all workers together
};

struct ConfigResult {
  std::string pattern, codec;
  double enc_mb = 0;
  double med_s = 0, min_s = 0, max_s = 0, med_slowest_s = 0;
  double up_mb = 0, down_mb = 0;           // per worker per round, syncer counters
  double files_up_mb = 0, files_down_mb = 0;  // per worker per round, the round's finished files
  uint64_t incomplete_reads = 0;           // downloads of a file still being written (retried)
  double up_enc = 0, down_enc = 0;         // as a multiple of one encoded gradient
  double exp_up = 0, exp_down = 0;         // the pattern's expectation, in encoded gradients
  double rel_err = 0;                      // max over rounds
  double cpu_s = 0;  // CPU seconds per round: the workers' all_reduce calls and the syncers, all together
  double syncer_cpu_s = 0;  // of which the syncers'
  CodecRound codec_only;                   // the same round's codec work alone
  uint64_t failovers_or_missing = 0;
  bool ok = true;
  std::string problem;
};

// One syncer engine per worker, passed by its own thread on every change and every poll_ms.
class SyncerThread {
 public:
  SyncerThread(const fs::path& shared, const fs::path& local, const std::string& worker, int poll_ms, bool wake)
      : poll_ms_(poll_ms) {
    syncer::SyncerOptions options;
    options.local = local;
    options.worker = worker;
    options.on_demand_prefixes = {"g-"};  // as `gradbox train` starts gradbox-sync
    syncer_ = std::make_unique<syncer::Syncer>(std::make_unique<syncer::MountedBackend>(shared), options);
    if (wake) changes_ = std::make_unique<syncer::ChangeWatch>(syncer_->watch_roots());
    thread_ = std::thread([this] {
      while (!stop_) {
        syncer_->run_pass();
        if (!changes_) {
          if (poll_ms_ > 0) std::this_thread::sleep_for(std::chrono::milliseconds(poll_ms_));
          continue;
        }
        // Until a change or the poll interval, looking at stop_ every 50 ms.
        const auto next_poll = Clock::now() + std::chrono::milliseconds(poll_ms_);
        while (!stop_ && Clock::now() < next_poll && !changes_->wait(std::chrono::milliseconds(50))) {
        }
      }
      cpu_s_ = thread_cpu_seconds();
    });
  }
  ~SyncerThread() { stop(); }
  void stop() {
    if (stop_.exchange(true)) return;
    thread_.join();
  }
  syncer::SyncerStats stats() const { return syncer_->stats(); }
  double cpu_seconds() const { return cpu_s_; }  // once stopped

 private:
  int poll_ms_;
  double cpu_s_ = 0;
  std::unique_ptr<syncer::Syncer> syncer_;
  std::unique_ptr<syncer::ChangeWatch> changes_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

ConfigResult run_config(const Options& opt, const std::vector<float>& base, exchange::ExchangePattern pattern,
                        codec::Codec codec_kind, const CodecContext& ctx) {
  const int N = opt.workers;
  const size_t n = base.size();
  const uint64_t tokens = 512;  // equal weights
  ConfigResult res;
  res.pattern = exchange::pattern_name(pattern);
  res.codec = codec::codec_name(codec_kind);
  res.enc_mb = ctx.encoded_bytes / 1e6;

  const fs::path root = fs::path(opt.dir) / (res.pattern + "-" + res.codec);
  fs::remove_all(root);
  const fs::path shared = root / "shared";
  fs::create_directories(shared);

  std::vector<std::string> members;
  for (int w = 0; w < N; ++w) members.push_back(worker_name(w));

  std::vector<std::unique_ptr<SyncerThread>> syncers;
  for (int w = 0; w < N; ++w)
    syncers.push_back(std::make_unique<SyncerThread>(shared, root / members[w], members[w], opt.poll_ms, opt.wake));

  // times[w][r], checksums[w][r], contributors[w][r], over warm-up and counted rounds
  const int total_rounds = opt.warmup + opt.rounds;
  std::vector<std::vector<double>> times(N, std::vector<double>(total_rounds));
  std::vector<double> cpu(N, 0);  // per worker, in its all_reduce calls of the counted rounds
  std::vector<std::vector<uint64_t>> sums(N, std::vector<uint64_t>(total_rounds));
  std::vector<std::vector<int>> contributors(N, std::vector<int>(total_rounds));
  std::vector<double> rel_err(total_rounds, 0);
  std::vector<uint64_t> files_up(N, 0), files_down(N, 0);
  std::vector<std::string> errors(N);
  std::barrier sync_point(N);
  std::atomic<bool> failed{false};

  auto worker_main = [&](int w) {
    try {
      exchange::FolderExchangeConfig c;
      c.run_id = "exchange-bench";
      c.model_fingerprint = 0x124;
      c.worker = members[w];
      c.members = members;
      c.local_dir = root / members[w];
      c.pattern = pattern;
      c.codec = codec::default_options(codec_kind);
      c.codec.threads = 1;
      // Generous: on two shared cores a round of fp32 can take a while; a timeout here would
      // drop a contributor and measure something else.
      c.contribution_timeout_s = 600;
      c.failover_timeout_s = 1200;
      c.give_up_timeout_s = 1800;
      c.fingerprint_interval = 0;
      c.gc_window = opt.gc_window;
      c.max_norm_ratio = opt.max_norm_ratio;
      if (opt.signed_run) c.file_mac = std::make_shared<const wire::FileMac>(wire::RunSecret::from_text("the bench's run secret", "bench"));
      c.check_alive = [&failed] {
        if (failed) throw std::runtime_error("another worker failed");
      };
      auto ex = exchange::make_folder_exchange(c);
      std::vector<float> g(n);
      std::vector<float> reference;
      for (int r = 1; r <= total_rounds; ++r) {
        const float s = scale_of(w, r);
        for (size_t i = 0; i < n; ++i) g[i] = base[i] * s;
        sync_point.arrive_and_wait();  // every worker's gradient is ready
        if (failed) return;
        const auto t0 = Clock::now();
        const double c0 = thread_cpu_seconds();
        const exchange::RoundResult result = ex->all_reduce(r, g.data(), n, {tokens, 1.0, false});
        times[w][r - 1] = seconds(t0, Clock::now());
        if (r > opt.warmup) cpu[w] += thread_cpu_seconds() - c0;
        contributors[w][r - 1] = result.skip ? -1 : result.contributors;
        // The checks below run once every worker is done, so they never compete with a timed call.
        sync_point.arrive_and_wait();
        if (failed) return;
        sums[w][r - 1] = checksum64(g.data(), n * sizeof(float));
        // Every file this worker needed for round r is flagged by now; nothing else of round r
        // travels to it (fingerprints are off) and garbage collection is gc_window rounds away.
        files_up[w] += round_bytes(c.local_dir / "outbox" / exchange::round_dir_name(r), false);
        files_down[w] += round_bytes(c.local_dir / "inbox" / exchange::round_dir_name(r), true);
        if (w == 0) {
          // The exact fp32 average, summed as the protocol does (worker order, y += w * x).
          reference.assign(n, 0.0f);
          const float weight = exchange::contribution_weight(tokens, tokens * N);
          for (int v = 0; v < N; ++v) {
            const float sv = scale_of(v, r);
            for (size_t i = 0; i < n; ++i) reference[i] += weight * (base[i] * sv);
          }
          double err = 0, norm = 0;
          for (size_t i = 0; i < n; ++i) {
            const double d = static_cast<double>(g[i]) - reference[i];
            err += d * d;
            norm += static_cast<double>(reference[i]) * reference[i];
          }
          rel_err[r - 1] = std::sqrt(err / norm);
        }
        sync_point.arrive_and_wait();  // the checks are over everywhere before the next round
      }
    } catch (const std::exception& e) {
      errors[w] = e.what();
      failed = true;
      sync_point.arrive_and_drop();
    }
  };
  std::vector<std::thread> threads;
  for (int w = 0; w < N; ++w) threads.emplace_back(worker_main, w);
  for (std::thread& t : threads) t.join();
  // Let in-flight transfers settle so the counters are complete, then stop the syncers.
  std::this_thread::sleep_for(std::chrono::milliseconds(100 + 4 * opt.poll_ms));
  uint64_t up = 0, down = 0;
  double cpu_total = 0;
  for (double c : cpu) cpu_total += c;
  for (auto& s : syncers) {
    s->stop();
    cpu_total += s->cpu_seconds() * opt.rounds / total_rounds;  // its share of the counted rounds
    res.syncer_cpu_s += s->cpu_seconds() / total_rounds;
    const syncer::SyncerStats st = s->stats();
    up += st.bytes_uploaded;
    down += st.bytes_downloaded;
    res.incomplete_reads += st.incomplete_seen;
    if (st.quarantined || st.corrupt_seen || st.upload_conflicts) {
      res.ok = false;
      res.problem += " syncer quarantined/corrupt/conflict;";
    }
  }
  syncers.clear();

  for (int w = 0; w < N; ++w)
    if (!errors[w].empty()) {
      res.ok = false;
      res.problem += " " + members[w] + ": " + errors[w] + ";";
    }
  std::vector<double> all, slowest;
  for (int r = 0; r < total_rounds && res.ok; ++r) {
    double worst = 0;
    for (int w = 0; w < N; ++w) {
      if (r >= opt.warmup) all.push_back(times[w][r]);
      worst = std::max(worst, times[w][r]);
      if (sums[w][r] != sums[0][r]) {
        res.ok = false;
        res.problem += " round " + std::to_string(r + 1) + ": " + members[w] + " differs from " + members[0] + ";";
      }
      if (contributors[w][r] != N) {
        res.ok = false;
        ++res.failovers_or_missing;
        res.problem += " round " + std::to_string(r + 1) + ": " + members[w] + " averaged " +
                       std::to_string(contributors[w][r]) + " contributors;";
      }
    }
    if (r >= opt.warmup) slowest.push_back(worst);
    res.rel_err = std::max(res.rel_err, rel_err[r]);
  }
  if (res.ok && codec_kind == codec::Codec::fp32 && res.rel_err != 0) {
    res.ok = false;
    res.problem += " fp32 average is not the exact one;";
  }
  if (!all.empty()) {
    res.med_s = median(all);
    res.min_s = *std::min_element(all.begin(), all.end());
    res.max_s = *std::max_element(all.begin(), all.end());
    res.med_slowest_s = median(slowest);
  }
  const double per = 1.0 / (static_cast<double>(N) * total_rounds);  // bytes: every round alike
  res.cpu_s = cpu_total / opt.rounds;
  res.up_mb = up * per / 1e6;
  res.down_mb = down * per / 1e6;
  uint64_t fu = 0, fd = 0;
  for (int w = 0; w < N; ++w) {
    fu += files_up[w];
    fd += files_down[w];
  }
  res.files_up_mb = fu * per / 1e6;
  res.files_down_mb = fd * per / 1e6;
  res.up_enc = up * per / ctx.encoded_bytes;
  res.down_enc = down * per / ctx.encoded_bytes;
  if (pattern == exchange::ExchangePattern::all_gather) {
    res.exp_up = 1;
    res.exp_down = N - 1;
  } else {
    res.exp_up = (N + 1.0) / N;
    res.exp_down = 2.0 * (N - 1) / N;
  }
  if (!opt.keep) fs::remove_all(root);
  return res;
}

// The codec work of one all_reduce and nothing else, as the baseline the exchange is measured
// against: per worker, error-feedback encode of each of its contributions (plain encode for fp32,
// as the exchange does), then the sum of its shard from every contribution (decode_accumulate),
// and for sharded the encode of the reduced shard and the decode of the others' reduced shards.
// The N workers run at once in N threads on the same cores as the exchange's workers, the
// payloads they decode are prepared beforehand, and buffers are reused across rounds as the
// exchange reuses them. What the exchange costs beyond this is files, syncing and waiting.
CodecRound run_codec_round(const Options& opt, const std::vector<float>& base, exchange::ExchangePattern pattern,
                           codec::Codec kind) {
  const int N = opt.workers;
  const size_t n = base.size();
  const bool sharded = pattern == exchange::ExchangePattern::sharded;
  const uint32_t S = sharded ? static_cast<uint32_t>(N) : 1;
  codec::CodecOptions o = codec::default_options(kind);
  o.threads = 1;
  const float weight = exchange::contribution_weight(1, N);
  auto range = [&](uint32_t k) { return exchange::shard_range(n, S, k); };

  // What peers' files would carry: every worker's contributions and every shard's reduced result.
  std::vector<std::vector<std::string>> contribution(N, std::vector<std::string>(S));
  std::vector<std::string> reduced(S);
  {
    std::vector<float> g(n);
    for (int w = 0; w < N; ++w) {
      for (size_t i = 0; i < n; ++i) g[i] = base[i] * scale_of(w, 1);
      for (uint32_t k = 0; k < S; ++k) codec::encode_into(g.data() + range(k).begin, range(k).size(), o, contribution[w][k]);
    }
    for (uint32_t k = 0; k < S; ++k) codec::encode_into(base.data() + range(k).begin, range(k).size(), o, reduced[k]);
  }

  std::vector<std::vector<double>> times(N, std::vector<double>(opt.rounds));
  std::vector<double> cpu(N, 0);
  std::barrier sync_point(N);
  auto worker_main = [&](int w) {
    std::vector<codec::ErrorFeedbackEncoder> encoders(S, codec::ErrorFeedbackEncoder(o));
    std::vector<std::string> own(S);
    std::string own_reduced;
    std::vector<float> g(n), sum;
    const uint32_t mine = sharded ? static_cast<uint32_t>(w) : 0;
    for (int r = 1; r <= opt.warmup + opt.rounds; ++r) {  // the warm-up as the exchange's
      const float s = scale_of(w, r);
      for (size_t i = 0; i < n; ++i) g[i] = base[i] * s;
      sync_point.arrive_and_wait();
      const auto t0 = Clock::now();
      const double c0 = thread_cpu_seconds();
      for (uint32_t k = 0; k < S; ++k) {
        if (kind == codec::Codec::fp32) codec::encode_into(g.data() + range(k).begin, range(k).size(), o, own[k]);
        else encoders[k].encode_into(g.data() + range(k).begin, range(k).size(), own[k]);
      }
      const exchange::ShardRange m = range(mine);
      float* out = sharded ? (sum.resize(m.size()), sum.data()) : g.data();
      std::fill(out, out + m.size(), 0.0f);
      for (int v = 0; v < N; ++v) {
        const std::string& p = v == w ? own[mine] : contribution[v][mine];
        codec::decode_accumulate(reinterpret_cast<const uint8_t*>(p.data()), p.size(), o, weight, out, m.size());
      }
      if (sharded) {
        codec::encode_into(sum.data(), sum.size(), o, own_reduced);
        for (uint32_t k = 0; k < S; ++k)
          if (k != mine)
            codec::decode(reinterpret_cast<const uint8_t*>(reduced[k].data()), reduced[k].size(), o,
                          g.data() + range(k).begin, range(k).size());
      }
      if (r > opt.warmup) {
        times[w][r - opt.warmup - 1] = seconds(t0, Clock::now());
        cpu[w] += thread_cpu_seconds() - c0;
      }
      sync_point.arrive_and_wait();
    }
  };
  std::vector<std::thread> threads;
  for (int w = 0; w < N; ++w) threads.emplace_back(worker_main, w);
  for (std::thread& t : threads) t.join();
  std::vector<double> all, slowest;
  for (int r = 0; r < opt.rounds; ++r) {
    double worst = 0;
    for (int w = 0; w < N; ++w) {
      all.push_back(times[w][r]);
      worst = std::max(worst, times[w][r]);
    }
    slowest.push_back(worst);
  }
  double cpu_total = 0;
  for (double c : cpu) cpu_total += c;
  return {median(all), median(slowest), cpu_total / opt.rounds};
}

}  // namespace

int main(int argc, char** argv) try {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  gradbox::keep_freed_heap_memory();  // as `gradbox train` does (Note [Freed memory is kept])
  const Options opt = parse(argc, argv);
  log::setup(log::parse_level(opt.log_level));
  const std::vector<float> base = load_gradient(opt.grad);
  const size_t n = base.size();
  const double fp32_mb = 4e-6 * static_cast<double>(n);
  std::printf("gradient: %s, %zu elements (%.1f MB fp32); %d workers, %d rounds per configuration after %d of "
              "warm-up, syncer poll %d ms%s, gc window %d, codec threads 1, %u hardware threads; %s, --max-norm-ratio %g\n",
              opt.grad.c_str(), n, fp32_mb, opt.workers, opt.rounds, opt.warmup, opt.poll_ms,
              opt.wake ? " and on every change" : " only", opt.gc_window,
              std::thread::hardware_concurrency(), opt.signed_run ? "signed" : "unsigned", opt.max_norm_ratio);
  fs::create_directories(opt.dir);

  // Context: the codec alone on the whole gradient.
  std::map<std::string, CodecContext> ctx;
  {
    std::vector<float> out(n);
    std::printf("\ncodec alone on the whole gradient (threads 1, median of %d):\n", opt.context_repeats);
    std::printf("%-6s %10s %7s %10s %10s %12s\n", "codec", "enc MB", "ratio", "encode s", "decode s",
                "EF encode s");
    for (const std::string& name : opt.codecs) {
      const codec::CodecOptions o = codec::default_options(codec::parse_codec(name));
      std::vector<double> te, td, tf;
      codec::ErrorFeedbackEncoder ef(o);
      std::vector<uint8_t> payload;
      for (int i = 0; i < opt.context_repeats; ++i) {
        auto t0 = Clock::now();
        payload = codec::encode(base.data(), n, o);
        te.push_back(seconds(t0, Clock::now()));
        t0 = Clock::now();
        codec::decode(payload.data(), payload.size(), o, out.data(), n);
        td.push_back(seconds(t0, Clock::now()));
        t0 = Clock::now();
        (void)ef.encode(base.data(), n);
        tf.push_back(seconds(t0, Clock::now()));
      }
      CodecContext& c = ctx[name];
      c.encoded_bytes = payload.size();
      c.encode_s = median(te);
      c.decode_s = median(td);
      c.ef_encode_s = median(tf);
      std::printf("%-6s %10.1f %6.2fx %10.3f %10.3f %12.3f\n", name.c_str(), c.encoded_bytes / 1e6,
                  4.0 * n / c.encoded_bytes, c.encode_s, c.decode_s, c.ef_encode_s);
    }
  }

  // Disk: the newest gc_window + 1 rounds stay, each at most (every outbox + the shared copy +
  // every inbox) = N + N + N(N-1) encoded gradients (all-gather; sharded moves less), plus a
  // round in flight.
  size_t largest = 0;
  for (const auto& [name, c] : ctx) largest = std::max(largest, c.encoded_bytes);
  const double need_gb = (opt.gc_window + 2.0) * (2.0 * opt.workers + opt.workers * (opt.workers - 1.0)) * largest / 1e9;
  const double have_gb = free_gb(opt.dir);
  std::printf("\ndisk: %s has %.1f GB free; the largest configuration needs up to about %.1f GB\n", opt.dir.c_str(),
              have_gb, need_gb);
  if (have_gb >= 0 && have_gb < need_gb * 1.1)
    throw std::runtime_error("not enough free disk under " + opt.dir + " (lower --gc-window or pick another --dir)");

  std::vector<ConfigResult> results;
  bool ok = true;
  for (const std::string& p : opt.patterns) {
    const exchange::ExchangePattern pattern = exchange::parse_pattern(p);
    for (const std::string& name : opt.codecs) {
      const codec::Codec kind = codec::parse_codec(name);
      std::printf("\n== %s %s: %d + %d rounds ...\n", p.c_str(), name.c_str(), opt.warmup, opt.rounds);
      const auto t0 = Clock::now();
      ConfigResult r = run_config(opt, base, pattern, kind, ctx.at(name));
      r.codec_only = run_codec_round(opt, base, pattern, kind);
      std::printf("   %.1f s; all_reduce median %.3f s (min %.3f, max %.3f, slowest worker %.3f); per worker per "
                  "round up %.1f MB (files %.1f), down %.1f MB (files %.1f, %llu looks at files still arriving); rel L2 vs exact "
                  "average %.2e; the codec work alone %.3f s (slowest %.3f), exchange/codec %.2fx; CPU per round (all workers and syncers) %.2f s (syncers %.2f s), codec alone %.2f s (%.2fx); %s%s\n",
                  seconds(t0, Clock::now()), r.med_s, r.min_s, r.max_s, r.med_slowest_s, r.up_mb, r.files_up_mb,
                  r.down_mb, r.files_down_mb, static_cast<unsigned long long>(r.incomplete_reads),
                  r.rel_err, r.codec_only.med_s, r.codec_only.med_slowest_s, r.med_s / r.codec_only.med_s, r.cpu_s,
                  r.syncer_cpu_s, r.codec_only.cpu_s, r.cpu_s / r.codec_only.cpu_s,
                  r.ok ? "replicas bit-identical" : "FAILED:", r.problem.c_str());
      ok = ok && r.ok;
      results.push_back(r);
    }
  }

  std::printf("\nSUMMARY: N=%d, %d rounds each after %d of warm-up; times are one all_reduce call; bytes are per worker per round: "
              "'sync' = syncer counters (bytes_uploaded / bytes_downloaded, downloads include the header looks at files "
              "still being written, counted in 'part'), 'files' = the round's finished files; xfp32 = multiple of one "
              "fp32 gradient (%.1f MB), xenc = multiple of one encoded gradient, of 'sync' bytes; exp = what the "
              "pattern should move, in encoded gradients; codec s = the same round's codec work alone (N threads "
              "at once, no files), xcodec = med s / codec s (target <= 1.5); CPU = CPU seconds per round of all workers' "
              "all_reduce calls and all syncers, xcpu = CPU over the codec work's CPU\n",
              opt.workers, opt.rounds, opt.warmup, fp32_mb);
  std::printf("%-10s %-5s %7s | %7s %7s %7s %7s | %7s %6s %6s %5s | %7s %7s %6s %6s %5s | %7s %7s %6s %6s %5s %4s | %8s %s\n",
              "pattern", "codec", "enc MB", "med s", "min s", "max s", "slow s", "codec s", "xcodec", "CPU s", "xcpu", "up sync", "files", "xfp32", "xenc", "exp",
              "dn sync", "files", "xfp32", "xenc", "exp", "part", "rel err", "check");
  for (const ConfigResult& r : results) {
    std::printf("%-10s %-5s %7.1f | %7.3f %7.3f %7.3f %7.3f | %7.3f %5.2fx %6.2f %4.2fx | %7.1f %7.1f %6.3f %6.3f %5.3f | %7.1f %7.1f "
                "%6.3f %6.3f %5.3f %4llu | %8.2e %s\n",
                r.pattern.c_str(), r.codec.c_str(), r.enc_mb, r.med_s, r.min_s, r.max_s, r.med_slowest_s,
                r.codec_only.med_s, r.med_s / r.codec_only.med_s, r.cpu_s, r.cpu_s / r.codec_only.cpu_s, r.up_mb,
                r.files_up_mb, r.up_mb / fp32_mb, r.up_enc, r.exp_up, r.down_mb, r.files_down_mb, r.down_mb / fp32_mb,
                r.down_enc, r.exp_down, static_cast<unsigned long long>(r.incomplete_reads), r.rel_err,
                r.ok ? "ok" : "FAILED");
  }
  std::printf("\ncodec alone (threads 1): ");
  for (const std::string& name : opt.codecs)
    std::printf("%s encode %.3f s, decode %.3f s, EF encode %.3f s; ", name.c_str(), ctx.at(name).encode_s,
                ctx.at(name).decode_s, ctx.at(name).ef_encode_s);
  std::printf("\n");
  return ok ? 0 : 1;
} catch (const std::exception& e) {
  std::fprintf(stderr, "exchange_bench: %s\n", e.what());
  return 2;
}
