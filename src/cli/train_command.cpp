// gradbox train: flags map onto worker::TrainConfig; a --config JSON file gives the base and
// flags given on the command line override it. SIGINT/SIGTERM stop the run at the next step
// boundary with a checkpoint, so the same command resumes it.
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <fstream>
#include <optional>
#include <set>
#include <sstream>

#include "cli/commands.h"
#include "common/directory_lock.h"
#include "common/disk_space.h"
#include "common/error.h"
#include "common/json_file.h"
#include "common/log.h"
#include "common/paths.h"
#include "exchange/folder_exchange.h"
#include "transport/hybrid_exchange.h"
#include "transport/network_exchange.h"
#include "mirror/sync_contract.h"
#include "worker/checkpoint.h"
#include "worker/memory_plan.h"
#include "worker/sidecar.h"
#include "worker/trainer.h"
#include "wire/file_mac.h"

namespace gradbox::cli {
namespace {

volatile std::sig_atomic_t g_stop_signal = 0;

void on_stop_signal(int signal) { g_stop_signal = signal; }

// A flag given twice takes its last value, so scripts can append overrides.
CLI::Option* take_last(CLI::Option* option) {
  return option->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
}

// A flag bound to one TrainConfig field, applied only when given on the command line.
class TrainFlags {
 public:
  explicit TrainFlags(CLI::App* cmd) : cmd_(cmd) {}

  template <class T>
  void add(const std::string& name, T worker::TrainConfig::*field, const std::string& help) {
    auto value = std::make_shared<T>(defaults_.*field);
    CLI::Option* opt = take_last(cmd_->add_option(name, *value, help)->capture_default_str());
    appliers_.push_back([opt, value, field](worker::TrainConfig& c) {
      if (opt->count() > 0) c.*field = *value;
    });
  }
  // A flag parsed from text (enums, paths).
  template <class T>
  void add_parsed(const std::string& name, T worker::TrainConfig::*field, const std::string& default_text,
                  std::function<T(const std::string&)> parse, const std::string& help) {
    auto text = std::make_shared<std::string>(default_text);
    CLI::Option* opt = take_last(cmd_->add_option(name, *text, help)->capture_default_str());
    appliers_.push_back([opt, text, field, parse](worker::TrainConfig& c) {
      if (opt->count() > 0) c.*field = parse(*text);
    });
  }

  void apply(worker::TrainConfig& config) const {
    for (const auto& apply : appliers_) apply(config);
  }

 private:
  CLI::App* cmd_;
  worker::TrainConfig defaults_;
  std::vector<std::function<void(worker::TrainConfig&)>> appliers_;
};

std::filesystem::path to_path(const std::string& text) { return text; }

// Flags of a many-worker run through a shared folder (see Note [Round agreement]).
struct SharedFlags {
  std::string shared;  // a folder, or an rclone remote "name:path"
  std::string local;   // the syncer's local mirror (default: <out>/sync)
  std::string worker;
  std::string peers;   // the founding workers' names, comma-separated (empty: this one)
  std::string run_id;
  std::string run_secret_file;  // empty: $GRADBOX_RUN_SECRET, else an unsigned run
  std::string pattern = "all-gather";
  std::string codec = "fp16";
  int zstd_level = 1;
  uint32_t shards = 0;
  double contribution_timeout = 30;
  double deadline_floor = 2;
  double deadline_k = 4;
  double failover_timeout = 60;
  double heartbeat_interval = 10;
  double stale_after = 60;
  double checkpoint_failover = 600;
  size_t keep_folder_checkpoints = 2;
  uint64_t checkpoint_part_bytes = 64ull << 20;
  double give_up_timeout = 900;
  int64_t fingerprint_interval = 10;
  int64_t gc_window = 8;
  double max_norm_ratio = 10;
  double upload_cap_gb = 750;
  std::string syncer = "auto";  // auto: start gradbox-sync as a sidecar; none: run it yourself
  std::string sync_backend = "mounted";
  std::string sync_args;        // extra gradbox-sync flags, space-separated (simulator settings)
  bool overlap = false;
  std::string transport = "folder";
  std::string c10d_backend = "auto";
  std::string c10d_dtype = "fp32";
  std::string c10d_interface;
  double c10d_timeout = 60;
  double c10d_regroup_window = 120;
  double c10d_stale_after = 5;
  double c10d_join_window = 300;
  bool c10d_overlap_backward = true;
  double c10d_bucket_mb = 16;
  std::string c10d_group;        // hybrid: this worker's group
  std::string c10d_group_peers;  // hybrid: the group's founding members
  std::string c10d_store;        // hybrid: the folder of the group's store
};

std::vector<std::string> split(const std::string& text, char sep) {
  std::vector<std::string> parts;
  std::string part;
  std::istringstream in(text);
  while (std::getline(in, part, sep))
    if (!part.empty()) parts.push_back(part);
  return parts;
}

void add_shared_flags(CLI::App* cmd, SharedFlags& f) {
  cmd->add_option("--shared", f.shared, "Shared folder (or rclone remote name:path) of a many-worker run");
  cmd->add_option("--local", f.local, "Local mirror of the shared folder (default: <out>/sync)");
  cmd->add_option("--worker", f.worker, "This worker's name (letters, digits, - and _)");
  cmd->add_option("--peers", f.peers,
                  "Founding workers of a new run, comma-separated (default: this one); ignored when joining a running one");
  cmd->add_option("--run-id", f.run_id, "Run identity carried by every file (default: the shared folder's name)");
  cmd->add_option("--max-norm-ratio", f.max_norm_ratio,
                  "Owners leave out a contribution whose norm exceeds this many times the median's (0: off); "
                  "non-finite values are always left out")
      ->capture_default_str();
  cmd->add_option("--upload-cap-gb", f.upload_cap_gb,
                  "This worker's upload allowance per 24 h, GB (Drive: 750 per account); warned as it nears it")
      ->capture_default_str();
  cmd->add_option("--run-secret-file", f.run_secret_file,
                  "The run secret every member shares, which signs every file (default: $GRADBOX_RUN_SECRET; "
                  "none: an unsigned run anyone with write access can inject into; `gradbox secret` makes one)");
  cmd->add_option("--exchange", f.pattern, "all-gather (everyone downloads everything) or sharded (owners reduce slices)")
      ->capture_default_str();
  cmd->add_option("--codec", f.codec, "Gradient codec: fp32, fp16, bf16, int8 or int4 (+zstd)")->capture_default_str();
  cmd->add_option("--zstd-level", f.zstd_level, "zstd level of the codec")->capture_default_str();
  cmd->add_option("--shards", f.shards, "Shards per gradient (0: 1 for all-gather, one per worker for sharded)");
  cmd->add_option("--contribution-timeout", f.contribution_timeout,
                  "Ceiling of the adaptive contribution deadline (seconds an owner waits for missing contributions)")
      ->capture_default_str();
  cmd->add_option("--deadline-floor", f.deadline_floor, "Floor of the adaptive contribution deadline (seconds)")
      ->capture_default_str();
  cmd->add_option("--deadline-k", f.deadline_k, "Deadline = median lag + k * spread of observed lags")->capture_default_str();
  cmd->add_option("--heartbeat-interval", f.heartbeat_interval, "Seconds between heartbeats")->capture_default_str();
  cmd->add_option("--stale-after", f.stale_after, "Seconds after which a heartbeat is stale")->capture_default_str();
  cmd->add_option("--checkpoint-failover", f.checkpoint_failover,
                  "Seconds before the next worker in line publishes a folder checkpoint that did not appear")
      ->capture_default_str();
  cmd->add_option("--keep-folder-checkpoints", f.keep_folder_checkpoints, "Checkpoints kept in the shared folder")
      ->capture_default_str();
  cmd->add_option("--checkpoint-part-bytes", f.checkpoint_part_bytes, "Size of the parts a folder checkpoint is cut into")
      ->capture_default_str();
  cmd->add_option("--failover-timeout", f.failover_timeout, "Seconds before the next owner takes over a shard")
      ->capture_default_str();
  cmd->add_option("--give-up-timeout", f.give_up_timeout, "Seconds after which a round with no agreement is an error")
      ->capture_default_str();
  cmd->add_option("--fingerprint-interval", f.fingerprint_interval, "Rounds between replica fingerprints (0: never)")
      ->capture_default_str();
  cmd->add_option("--gc-window", f.gc_window, "Rounds of files kept behind the newest applied one")->capture_default_str();
  cmd->add_option("--syncer", f.syncer, "auto (start gradbox-sync beside the worker) or none")->capture_default_str();
  cmd->add_option("--sync-backend", f.sync_backend, "mounted, rclone or sim (the cloud-folder simulator)")
      ->capture_default_str();
  cmd->add_option("--sync-args", f.sync_args, "Extra gradbox-sync flags, space-separated (e.g. simulator settings)");
  cmd->add_flag("--overlap", f.overlap, "Exchange round r while step r+1 computes (one-step-delayed update)");
  cmd->add_option("--transport", f.transport,
                  "folder (files through the shared folder), c10d (Gloo/NCCL over a network the workers share; "
                  "the shared folder holds only the group's store) or hybrid (groups over c10d, the folder between them)")
      ->capture_default_str();
  cmd->add_option("--c10d-backend", f.c10d_backend, "auto (nccl on CUDA, gloo on CPU), gloo or nccl")->capture_default_str();
  cmd->add_option("--c10d-dtype", f.c10d_dtype,
                  "Precision of the gradient on the wire: fp32, fp16 or bf16 (NCCL; over Gloo bf16 goes as fp16)")
      ->capture_default_str();
  cmd->add_option("--c10d-interface", f.c10d_interface,
                  "Gloo's network interface (eth0, lo; default: the address of this machine's hostname)");
  cmd->add_option("--c10d-timeout", f.c10d_timeout,
                  "Seconds a collective may wait for a silent peer before the group is re-formed without it")
      ->capture_default_str();
  cmd->add_option("--c10d-stale-after", f.c10d_stale_after,
                  "Seconds without a heartbeat after which a member that is not in a collective is given up")
      ->capture_default_str();
  cmd->add_option("--c10d-regroup-window", f.c10d_regroup_window,
                  "After a failure: the longest the first survivor waits for a live member to enter the next group epoch")
      ->capture_default_str();
  cmd->add_option("--c10d-join-window", f.c10d_join_window, "Seconds the founders wait for each other at the start")
      ->capture_default_str();
  cmd->add_option("--c10d-overlap-backward", f.c10d_overlap_backward,
                  "Per-step rounds: all-reduce the gradient's buckets while backward computes the rest (true/false; "
                  "every member must agree)")
      ->capture_default_str();
  cmd->add_option("--c10d-bucket-mb", f.c10d_bucket_mb, "Megabytes of fp32 gradient per all-reduce bucket")
      ->capture_default_str();
  cmd->add_option("--c10d-group", f.c10d_group,
                  "Hybrid: this worker's group (workers that reach each other); the group is one worker in the folder");
  cmd->add_option("--c10d-group-peers", f.c10d_group_peers, "Hybrid: the group's founding members, comma-separated");
  cmd->add_option("--c10d-store", f.c10d_store,
                  "Hybrid: a folder every member of the group can lock (local disk for one machine, NFS for a lab)");
  for (CLI::Option* option : cmd->get_options())  // like the train flags: the last value wins
    if (option->get_expected_min() > 0) take_last(option);
}

// Note [Signed files] in wire/file_mac.h. The secret must stay out of the shared folder: anyone
// who can read the folder could then sign.
std::shared_ptr<const wire::FileMac> run_mac(const SharedFlags& f) {
  std::optional<std::filesystem::path> file;
  if (!f.run_secret_file.empty()) {
    file = f.run_secret_file;
    const bool remote = f.shared.find(':') != std::string::npos;  // an rclone remote: nothing local to lie in
    GB_REQUIRE(remote || !is_within(*file, f.shared), "--run-secret-file ", f.run_secret_file, ": lies in the shared folder ",
               f.shared, ", where everyone who can read it could sign; keep it outside");
  }
  std::optional<wire::RunSecret> secret = wire::RunSecret::find(file);
  if (!secret) {
    log::Logger("train").warn(str("UNSIGNED RUN: without a run secret anyone who can write to ", f.shared,
                                  " can inject gradients into this run. Give every worker the same "
                                  "--run-secret-file or $", wire::RunSecret::kEnvironmentVariable,
                                  " (`gradbox secret` makes one)"));
    return nullptr;
  }
  auto mac = std::make_shared<const wire::FileMac>(*secret);
  // Note [Member signatures]: a credential writes as its member only.
  GB_REQUIRE(mac->member().empty() || mac->member() == f.worker, "--worker ", f.worker, ": the run secret from ",
             secret->origin(), " is the member credential of ", mac->member(), ", which can sign only as ",
             mac->member(), "; run this worker as --worker ", mac->member(), " or ask the run's owner for a credential (",
             "`gradbox secret --member ", f.worker, "`)");
  return mac;
}

exchange::FolderExchangeConfig exchange_config(const SharedFlags& f, const worker::TrainConfig& train,
                                               worker::Trainer& trainer, const std::filesystem::path& local) {
  exchange::FolderExchangeConfig c;
  c.run_id = f.run_id.empty() ? std::filesystem::path(f.shared.substr(f.shared.find(':') + 1)).filename().string()
                              : f.run_id;
  GB_REQUIRE(!c.run_id.empty(), "--run-id: cannot derive one from --shared ", f.shared, "; give it");
  c.model_fingerprint = worker::model_fingerprint(trainer.model().config());
  c.model_config_json = trainer.model().config().to_json().dump();
  c.train_config_json = train.to_json().dump();
  c.worker = f.worker;
  c.file_mac = run_mac(f);
  c.members = split(f.peers, ',');
  // Only founding members compare initial weights (Note [Founders' own initial weights]): a
  // joiner skips hashing the whole state at start-up.
  if (c.members.size() > 1 && std::find(c.members.begin(), c.members.end(), c.worker) != c.members.end())
    c.initial_state_checksum = trainer.initial_state_checksum();
  c.local_dir = local;
  c.pattern = exchange::parse_pattern(f.pattern);
  c.shard_count = f.shards;
  try {
    c.codec = codec::default_options(codec::parse_codec(f.codec));
  } catch (const InputError& e) {
    throw InputError(str("--codec ", f.codec, ": ", e.what()));
  }
  c.codec.zstd_level = f.zstd_level;
  c.codec.threads = static_cast<int>(std::max<int64_t>(1, train.threads));
  c.contribution_timeout_s = f.contribution_timeout;
  c.deadline_floor_s = std::min(f.deadline_floor, f.contribution_timeout);
  c.deadline_k = f.deadline_k;
  c.failover_timeout_s = f.failover_timeout;
  c.heartbeat_interval_s = f.heartbeat_interval;
  c.stale_after_s = f.stale_after;
  c.checkpoint_failover_s = f.checkpoint_failover;
  c.keep_folder_checkpoints = f.keep_folder_checkpoints;
  c.checkpoint_part_bytes = f.checkpoint_part_bytes;
  c.wait_for_syncer = true;
  c.give_up_timeout_s = f.give_up_timeout;
  c.fingerprint_interval = f.fingerprint_interval;
  c.gc_window = f.gc_window;
  GB_REQUIRE(f.max_norm_ratio == 0 || f.max_norm_ratio >= 1, "--max-norm-ratio ", f.max_norm_ratio,
             ": 0 (off) or at least 1 (a contribution's norm may be that many times the median's)");
  c.max_norm_ratio = f.max_norm_ratio;
  GB_REQUIRE(f.upload_cap_gb > 0, "--upload-cap-gb ", f.upload_cap_gb, ": must be positive");
  c.upload_cap_bytes = static_cast<uint64_t>(f.upload_cap_gb * 1e9);
  c.grad_accum = train.grad_accum;
  c.sync = worker::describe_sync(train);
  c.late_entry = train.sync == worker::SyncMode::diloco && train.round_seconds > 0;  // Note [Late entry]
  // Note [Overlapped time-boxed rounds] in exchange/folder_exchange.h.
  c.boxes_from_agreement = c.late_entry && train.overlap_steps > 0;
  c.round_seconds = train.round_seconds;
  c.partial_deltas = c.boxes_from_agreement && train.partial_every > 0;
  GB_REQUIRE(!f.overlap || train.sync == worker::SyncMode::gradient, "--overlap: only with --sync gradient");
  return c;
}

// Note [Network transport] in transport/network_exchange.h: the group's store lives in the
// shared folder, which must then be a file system every member can lock (one machine, NFS).
// group: empty for --transport c10d (every worker is in the run's one group); the group's name
// for --transport hybrid (its own store, its own founders).
std::unique_ptr<transport::NetworkExchange> network_exchange(const SharedFlags& f, const worker::TrainConfig& train,
                                                             const std::string& run_id, const std::string& group,
                                                             const torch::Device& device) {
  const bool cuda = device.is_cuda();
  GB_REQUIRE(!group.empty() || f.sync_backend != "rclone", "--transport c10d: the shared folder must be a mounted "
             "file system every member can lock, not an rclone remote (--transport hybrid takes one)");
  GB_REQUIRE(!f.overlap, "--overlap: not with --transport c10d yet");
  transport::NetworkExchangeConfig c;
  c.worker = f.worker;
  if (group.empty()) {
    c.run_id = run_id;
    c.founders = split(f.peers, ',');
    c.store_path = std::filesystem::path(f.shared) / "c10d" / (run_id + ".store");
  } else {
    GB_REQUIRE(!f.c10d_store.empty(), "--transport hybrid: --c10d-store DIR is required (a folder every member of "
               "group ", group, " can lock: local disk for one machine's GPUs, NFS for a lab)");
    c.run_id = run_id + "." + group;
    c.founders = split(f.c10d_group_peers.empty() ? f.worker : f.c10d_group_peers, ',');
    c.store_path = std::filesystem::path(f.c10d_store) / (c.run_id + ".store");
  }
  c.backend = f.c10d_backend == "auto" ? (cuda ? transport::NetworkBackend::nccl : transport::NetworkBackend::gloo)
                                       : transport::parse_network_backend(f.c10d_backend, "--c10d-backend");
  GB_REQUIRE(cuda || c.backend == transport::NetworkBackend::gloo, "--c10d-backend nccl: needs --device cuda");
  c.interface = f.c10d_interface;
  c.wire = transport::parse_wire_dtype(f.c10d_dtype, "--c10d-dtype");
  c.cuda_device = cuda && device.has_index() ? device.index() : 0;
  GB_REQUIRE(f.c10d_timeout > 0, "--c10d-timeout ", f.c10d_timeout, ": must be positive");
  c.timeout_s = f.c10d_timeout;
  c.regroup_window_s = f.c10d_regroup_window;
  GB_REQUIRE(f.c10d_stale_after >= 1, "--c10d-stale-after ", f.c10d_stale_after,
             ": at least 1 (heartbeats come every 0.5 s)");
  c.stale_after_s = f.c10d_stale_after;
  c.join_window_s = f.c10d_join_window;
  GB_REQUIRE(f.c10d_bucket_mb > 0 && f.c10d_bucket_mb <= 1024, "--c10d-bucket-mb ", f.c10d_bucket_mb,
             ": expected more than 0 and at most 1024");
  c.bucket_floats = std::max<size_t>(1, static_cast<size_t>(f.c10d_bucket_mb * (1 << 20) / sizeof(float)));
  c.overlap_backward = f.c10d_overlap_backward;
  c.checkpoint_interval = train.checkpoint_interval;  // joiners enter at these checkpoints
  return std::make_unique<transport::NetworkExchange>(std::move(c), mirror::system_clock());
}

std::unique_ptr<worker::Sidecar> start_syncer(const SharedFlags& f, const std::filesystem::path& local) {
  GB_REQUIRE(f.syncer == "auto" || f.syncer == "none", "--syncer ", f.syncer, ": auto or none");
  if (f.syncer == "none") return nullptr;
  std::vector<std::string> argv{worker::sibling_executable("gradbox-sync").string(),
                                "--shared", f.shared, "--local", local.string(), "--worker", f.worker,
                                "--backend", f.sync_backend, "--parent-pid", std::to_string(::getpid())};
  // Checkpoint parts are fetched only by a worker that loads the checkpoint, partial deltas
  // only when one stands in for a worker, contributions only for the rounds a worker takes part
  // in (a sharded one's only by their shard's owner).
  for (std::string_view prefix : {mirror::kCheckpointPartPrefix, mirror::kPartialPrefix, mirror::kContributionPrefix}) {
    argv.push_back("--on-demand-prefix");
    argv.emplace_back(prefix);
  }
  for (const std::string& arg : split(f.sync_args, ' ')) argv.push_back(arg);
  return std::make_unique<worker::Sidecar>(argv, local / mirror::kSyncerLogFile);
}

// The last line of a log that has one (the tail only: a syncer's log can be long).
std::string last_line_of(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) return "";
  const std::streamoff size = in.tellg();
  const std::streamoff from = std::max<std::streamoff>(0, size - 4096);
  in.seekg(from);
  std::string tail(static_cast<size_t>(size - from), '\0');
  in.read(tail.data(), static_cast<std::streamsize>(tail.size()));
  while (!tail.empty() && (tail.back() == '\n' || tail.back() == '\r')) tail.pop_back();
  return tail.substr(tail.rfind('\n') == std::string::npos ? 0 : tail.rfind('\n') + 1);
}

// The syncer is gone: say why, in words the user can act on.
[[noreturn]] void syncer_exited(worker::Sidecar& sidecar, const std::filesystem::path& local) {
  const std::filesystem::path log = local / mirror::kSyncerLogFile;
  const std::string last = last_line_of(log);
  if (sidecar.exit_status() == mirror::kSyncerExitLocalDiskFull) {  // Note [A full disk]
    // Its last words name the file, when the full disk let it write them.
    const std::optional<uint64_t> free = free_bytes(local);
    const std::string why = last.find("disk is full") != std::string::npos ? str(" (", last, ")")
                            : free ? str(" (", bytes_text(*free), " free there)")
                                   : std::string();
    throw DiskFullError(local.string(), str("the disk is full: the syncer (gradbox-sync) could not write under ",
                                            local.string(), why, "; see ", log.string()));
  }
  throw SystemFault(str("the syncer (gradbox-sync) exited with status ", sidecar.exit_status(),
                        last.empty() ? "" : str(", saying: ", last), "; see ", log.string()));
}

// Trains until `should_stop` says so; a full disk ends the run saying where the last whole
// checkpoint is (Note [A full disk]).
worker::TrainSummary run_until_stopped(worker::Trainer& trainer, const worker::StopPredicate& should_stop,
                                       const std::filesystem::path& run_dir) {
  try {
    return trainer.run(should_stop);
  } catch (const std::exception& e) {
    std::string path;
    if (!is_disk_full(e, &path)) throw;
    const std::optional<std::filesystem::path> last = worker::find_latest_checkpoint(run_dir);
    throw DiskFullError(path, str(dynamic_cast<const DiskFullError*>(&e) ? "" : "the disk is full: ", e.what(), ". ",
                                  last ? str("The last checkpoint, ", last->string(),
                                             ", is whole: free space and start this worker again to resume from it")
                                       : std::string("No checkpoint was written yet")));
  }
}

// `gradbox train --help` lists its ~70 flags under these headings, the few a new user needs
// first. Every flag must be named here (a new one that is not fails at start-up).
void group_train_flags(CLI::App* cmd) {
  static const std::vector<std::pair<std::string, std::vector<std::string>>> kGroups = {
      {"Start here", {"--help", "--help-all", "--config", "--data", "--out", "--model", "--max-steps", "--device"}},
      {"Model and batch",
       {"--init-from", "--micro-batch", "--block-size", "--grad-accum", "--curriculum", "--dropout", "--activation-checkpointing", "--lm-head-chunk",
        "--precision", "--threads", "--local-workers", "--seed", "--emulate-workers", "--memory-report",
        "--memory-budget-gb"}},
      {"Optimizer",
       {"--optimizer", "--moments", "--lr", "--min-lr", "--warmup-steps", "--weight-decay", "--beta1", "--beta2", "--eps",
        "--grad-clip"}},
      {"Stability", {"--spike-z", "--spike-window", "--spike-rollback", "--inject-spike-steps", "--inject-spike-factor"}},
      {"Evaluation, checkpoints and logs",
       {"--eval-interval", "--eval-batches", "--thermometer-interval", "--checkpoint-interval", "--keep-checkpoints", "--log-interval",
        "--stop-at-step"}},
      {"Many workers: a shared folder",
       {"--shared", "--local", "--worker", "--peers", "--run-id", "--run-secret-file", "--max-norm-ratio", "--upload-cap-gb", "--exchange", "--codec", "--zstd-level", "--shards",
        "--overlap"}},
      {"Network transport", {"--transport", "--c10d-backend", "--c10d-dtype", "--c10d-interface", "--c10d-timeout",
                             "--c10d-stale-after", "--c10d-regroup-window", "--c10d-join-window",
                             "--c10d-overlap-backward", "--c10d-bucket-mb",
                             "--c10d-group", "--c10d-group-peers", "--c10d-store"}},
      {"Synchronisation: per-step gradients or DiLoCo rounds",
       {"--sync", "--inner-steps", "--outer-lr", "--inner-lr-scale", "--outer-momentum", "--sync-warmup-steps",
        "--round-seconds", "--fragments", "--overlap-steps", "--late-outer-step", "--partial-every"}},
      {"Elastic runs: deadlines, failover, folder checkpoints",
       {"--contribution-timeout", "--deadline-floor", "--deadline-k", "--heartbeat-interval", "--stale-after",
        "--checkpoint-failover", "--keep-folder-checkpoints", "--checkpoint-part-bytes", "--failover-timeout",
        "--give-up-timeout", "--fingerprint-interval", "--gc-window"}},
      {"Syncer", {"--syncer", "--sync-backend", "--sync-args"}},
  };
  std::set<std::string> grouped;
  for (const auto& [heading, names] : kGroups)
    for (const std::string& name : names) {
      cmd->get_option(name)->group(heading);  // throws CLI::OptionNotFound for a name that is not a flag
      grouped.insert(name);
    }
  for (const CLI::Option* option : cmd->get_options())
    GB_CHECK(grouped.count(option->get_name()) > 0, "train flag ", option->get_name(), " has no --help heading");
}

// --memory-report (Note [Memory plan] in worker/memory_plan.h): the plan of this run's step, against
// --memory-budget-gb (a T4: 15), or the host's memory on the CPU.
void print_memory_report(const worker::TrainConfig& config, const SharedFlags& shared, double budget_gb) {
  config.validate();
  // The device is planned for, not used: a T4's plan can be made on a laptop.
  const bool cuda = config.device.rfind("cuda", 0) == 0 || (config.device == "auto" && torch::cuda::is_available());
  const std::string device = config.device == "auto" ? (cuda ? "cuda" : "cpu") : config.device;
  worker::MemoryPlanInputs in;
  const data::DatasetInfo data = data::read_dataset_info(config.data_dir);
  in.model = worker::resolve_model_config(config, data);
  in.micro_batch = config.micro_batch;
  in.block_size = in.model.block_size;
  in.cuda = cuda;
  in.precision = config.precision != worker::Precision::auto_select ? config.precision
                 : cuda                                          ? worker::Precision::bf16
                                                                 : worker::Precision::fp32;
  GB_REQUIRE(cuda || in.precision == worker::Precision::fp32, "--precision ", worker::to_string(in.precision),
             ": needs a CUDA device (on CPU use fp32)");
  in.optimizer = config.optimizer;
  in.moments = config.moments;
  const auto checkpointing = model::ActivationCheckpointing::parse(config.activation_checkpointing);
  for (int64_t layer = 0; layer < in.model.n_layer; ++layer) in.checkpointed_layers += checkpointing.applies_to(layer, in.model.n_layer);
  in.lm_head_chunk = config.lm_head_chunk;
  in.diloco = config.sync == worker::SyncMode::diloco;
  in.exchange = !shared.shared.empty();
  in.overlap = shared.overlap;
  double capacity = budget_gb * 1024.0 * 1024.0 * 1024.0;
  if (capacity <= 0 && !in.cuda) capacity = static_cast<double>(::sysconf(_SC_PHYS_PAGES)) * static_cast<double>(::sysconf(_SC_PAGE_SIZE));
  const worker::MemoryPlan plan = worker::plan_memory(in);
  std::fputs(worker::format_memory_plan(plan, in, capacity, device).c_str(), stdout);
  if (capacity <= 0) std::puts("  (give --memory-budget-gb, e.g. 15 for a T4, for a verdict)");
}

}  // namespace

void add_train_command(CLI::App& app) {
  CLI::App* cmd = app.add_subcommand("train", "Train a model on a prepared data folder (resumes when the run folder has a checkpoint)");
  auto flags = std::make_shared<TrainFlags>(cmd);
  auto config_file = std::make_shared<std::string>();
  auto stop_at_step = std::make_shared<int64_t>(0);
  cmd->add_option("--config", *config_file, "JSON file with train settings; flags override it");
  auto memory_report = std::make_shared<bool>(false);
  auto memory_budget_gb = std::make_shared<double>(0);
  cmd->add_flag("--memory-report", *memory_report,
                "Print what a step of this run keeps in memory, part by part, and whether it fits; then exit");
  cmd->add_option("--memory-budget-gb", *memory_budget_gb,
                  "--memory-report: the device's memory in GiB (15 for a T4); default: the host's memory on the CPU");
  flags->add_parsed<std::filesystem::path>("--data", &worker::TrainConfig::data_dir, "", to_path,
                                           "Prepared data folder (gradbox prepare)");
  flags->add_parsed<std::filesystem::path>("--out", &worker::TrainConfig::out_dir, "runs/default", to_path,
                                           "Run folder: checkpoints, metrics.jsonl, tokenizer");
  flags->add("--model", &worker::TrainConfig::model, "Preset name or model config .json");
  flags->add_parsed<std::filesystem::path>("--init-from", &worker::TrainConfig::init_from, "", to_path,
                                           "Hugging Face folder to fine-tune from");
  flags->add("--micro-batch", &worker::TrainConfig::micro_batch, "Sequences per forward/backward");
  flags->add("--block-size", &worker::TrainConfig::block_size, "Tokens per sequence (0: the model's)");
  flags->add("--grad-accum", &worker::TrainConfig::grad_accum, "Micro-batches per optimizer step");
  flags->add("--max-steps", &worker::TrainConfig::max_steps, "Optimizer steps in the whole run");
  flags->add("--curriculum", &worker::TrainConfig::curriculum,
             "Short sequences and small batches first: STEP:BLOCK[:ACCUM],... each stage from its step on "
             "(e.g. 1:256:8,2000:512:16,8000:1024)");
  flags->add_parsed<worker::OptimizerKind>("--optimizer", &worker::TrainConfig::optimizer, "adamw",
                                           worker::parse_optimizer, "adamw, lamb or sgd");
  flags->add("--lr", &worker::TrainConfig::lr, "Peak learning rate");
  flags->add("--min-lr", &worker::TrainConfig::min_lr, "Learning rate at the end of the cosine");
  flags->add("--warmup-steps", &worker::TrainConfig::warmup_steps, "Linear warmup steps");
  flags->add("--weight-decay", &worker::TrainConfig::weight_decay, "Decoupled weight decay (not on biases, norms, embeddings)");
  flags->add("--beta1", &worker::TrainConfig::beta1, "Adam beta1");
  flags->add("--beta2", &worker::TrainConfig::beta2, "Adam beta2");
  flags->add("--eps", &worker::TrainConfig::eps, "Adam epsilon");
  flags->add("--grad-clip", &worker::TrainConfig::grad_clip, "Clip the global gradient norm (0: off)");
  flags->add("--dropout", &worker::TrainConfig::dropout, "Dropout probability");
  flags->add("--activation-checkpointing", &worker::TrainConfig::activation_checkpointing,
             "none, alternate, first_last, all or custom:0,3,5");
  flags->add("--lm-head-chunk", &worker::TrainConfig::lm_head_chunk,
             "LM head and cross-entropy this many token positions at a time, never all logits at once (0: off)");
  flags->add("--thermometer-interval", &worker::TrainConfig::thermometer_interval,
             "Every N steps, write each layer's largest attention logit, MLP output and residual value to "
             "metrics.jsonl (0: off)");
  flags->add("--spike-z", &worker::TrainConfig::spike_z,
             "Skip a step whose loss or gradient norm is more than this many deviations above the last "
             "--spike-window steps' (0: off; Note [Spike guard])");
  flags->add("--spike-window", &worker::TrainConfig::spike_window, "Applied steps the spike guard's statistics cover");
  flags->add("--spike-rollback", &worker::TrainConfig::spike_rollback,
             "Roll back to the newest checkpoint after this many skipped spikes in a window, skipping the batches "
             "since (0: never; per-step rounds)");
  flags->add_parsed<std::vector<int64_t>>("--inject-spike-steps", &worker::TrainConfig::inject_spike_steps, "",
                                          worker::parse_step_list,
                                          "Testing: multiply these steps' loss (and gradient) by --inject-spike-factor, "
                                          "as a poisoned batch would (comma-separated)");
  flags->add("--inject-spike-factor", &worker::TrainConfig::inject_spike_factor, "Testing: see --inject-spike-steps");
  flags->add("--eval-interval", &worker::TrainConfig::eval_interval, "Steps between validation runs (0: never)");
  flags->add("--eval-batches", &worker::TrainConfig::eval_batches, "Validation batches of 8 sequences per validation run (the same ones on every worker)");
  flags->add("--checkpoint-interval", &worker::TrainConfig::checkpoint_interval, "Steps between checkpoints (0: end only, -1: never)");
  flags->add("--keep-checkpoints", &worker::TrainConfig::keep_checkpoints, "Checkpoints kept in the run folder");
  flags->add("--log-interval", &worker::TrainConfig::log_interval, "Steps between progress lines");
  flags->add("--seed", &worker::TrainConfig::seed, "Seed for weights, data order and dropout");
  flags->add("--device", &worker::TrainConfig::device, "auto, cpu, cuda or cuda:N");
  flags->add_parsed<worker::MomentStorage>("--moments", &worker::TrainConfig::moments, "fp32", worker::parse_moments,
                                           "AdamW's moments in fp32, or int8: 8 bits a value on a logarithmic scale per "
                                           "block of 256, 2 bytes a parameter instead of 8 (Note [8-bit moments])");
  flags->add_parsed<worker::Precision>("--precision", &worker::TrainConfig::precision, "auto", worker::parse_precision,
                                       "auto (on CUDA bf16 from Ampere on, fp16 before it, e.g. a T4; fp32 on CPU), fp32, bf16 or fp16");
  flags->add("--threads", &worker::TrainConfig::threads, "CPU threads (0: cores / local workers)");
  flags->add("--local-workers", &worker::TrainConfig::local_workers, "gradbox processes sharing this machine");
  take_last(cmd->add_option("--stop-at-step", *stop_at_step, "Stop after this step with a checkpoint, as if interrupted (0: never)"));
  flags->add("--emulate-workers", &worker::TrainConfig::emulate_workers,
             "One process on the union of workers' batches, name:micro_batch,... (the cluster reference)");
  flags->add_parsed<worker::SyncMode>("--sync", &worker::TrainConfig::sync, "gradient", worker::parse_sync,
                                      "gradient (average gradients every step) or diloco (average parameter deltas "
                                      "every --inner-steps steps, then an outer Nesterov step)");
  flags->add("--inner-steps", &worker::TrainConfig::inner_steps, "DiLoCo: local steps per round (H)");
  flags->add("--outer-lr", &worker::TrainConfig::outer_lr, "DiLoCo: learning rate of the outer SGD step");
  flags->add("--inner-lr-scale", &worker::TrainConfig::inner_lr_scale,
             "DiLoCo: the inner steps' learning rate as a multiple of --lr's schedule (a worker's inner batch is "
             "its own, not the cluster's)");
  flags->add("--outer-momentum", &worker::TrainConfig::outer_momentum, "DiLoCo: Nesterov momentum of the outer step (the papers' 0.9; at under a million parameters 0.8 "
             "measured 2.4 points of loss better, README's quality table)");
  flags->add("--sync-warmup-steps", &worker::TrainConfig::sync_warmup_steps,
             "DiLoCo: per-step gradient rounds before the first DiLoCo round");
  flags->add("--round-seconds", &worker::TrainConfig::round_seconds,
             "Time-boxed rounds: compute as much of a round as fits in this time (DiLoCo: up to --inner-steps "
             "steps; per-step: up to --grad-accum micro-batches); 0: fixed rounds");
  flags->add("--fragments", &worker::TrainConfig::fragments,
             "Streaming DiLoCo: parameter fragments (strided layer groups), one synced every --inner-steps / F steps");
  flags->add("--overlap-steps", &worker::TrainConfig::overlap_steps,
             "Streaming DiLoCo: inner steps a fragment's exchange runs behind before its outer step is merged; "
             "with --round-seconds, each round is sent when its box closes and merged once agreed");
  flags->add_parsed<worker::LateOuterStep>(
      "--late-outer-step", &worker::TrainConfig::late_outer_step, "delayed", worker::parse_late_outer_step,
      "DiLoCo with --overlap-steps: the overlapped steps start from this worker's own parameters (delayed), or from "
      "the agreed ones moved by an outer step on this worker's fresh delta at its share, the eager-updates paper's "
      "rule (eager: measured worse here, see Note [Eager outer steps]); the agreed step is merged under either");
  flags->add("--partial-every", &worker::TrainConfig::partial_every,
             "Overlapped time-boxed DiLoCo: publish the round's delta so far every this many inner steps, so that a "
             "session dying mid-round still contributes its steps (0: off)");
  auto shared = std::make_shared<SharedFlags>();
  add_shared_flags(cmd, *shared);
  group_train_flags(cmd);

  cmd->callback([flags, config_file, stop_at_step, shared, memory_report, memory_budget_gb] {
    worker::TrainConfig config;
    if (!config_file->empty()) {
      config = worker::TrainConfig::from_json(read_json_file(*config_file), *config_file);
    }
    flags->apply(config);
    const bool many = !shared->shared.empty();
    GB_REQUIRE(many || shared->worker.empty(), "--worker: needs --shared");
    if (many) {
      GB_REQUIRE(!shared->worker.empty(), "--worker: required with --shared");
      config.worker = shared->worker;
    }

    if (*memory_report) return print_memory_report(config, *shared, *memory_budget_gb);
    // Before anything reads or writes the folder: a second session there is refused whole.
    const DirectoryLock out_lock(config.out_dir, "--out");
    std::optional<DirectoryLock> local_lock;
    if (many && !shared->local.empty()) local_lock.emplace(shared->local, "--local");
    for (const std::string& warning : {out_lock.warning(), local_lock ? local_lock->warning() : std::string()})
      if (!warning.empty()) log::Logger("train").warn(warning);
    worker::Trainer trainer(config);
    std::unique_ptr<worker::Sidecar> syncer;
    const std::filesystem::path local = shared->local.empty() ? config.out_dir / "sync" : std::filesystem::path(shared->local);
    if (many) {
      exchange::FolderExchangeConfig exchange = exchange_config(*shared, config, trainer, local);
      // A run's folder is made by whoever comes first (an rclone remote makes its own), but only
      // inside an existing folder: a missing parent is an unmounted drive, not a new run.
      if (shared->sync_backend != "rclone") {
        std::filesystem::path run_folder = std::filesystem::absolute(shared->shared).lexically_normal();
        if (!run_folder.has_filename()) run_folder = run_folder.parent_path();  // "a/run/" -> "a/run"
        GB_REQUIRE(std::filesystem::is_directory(run_folder.parent_path()), "--shared ", shared->shared,
                   ": the parent folder ", run_folder.parent_path().string(), " does not exist (is the drive mounted?)");
        std::filesystem::create_directories(run_folder);
      }
      const std::string& transport = shared->transport;
      GB_REQUIRE(transport == "folder" || transport == "c10d" || transport == "hybrid", "--transport ", transport,
                 ": folder, c10d or hybrid");
      const torch::Device device = trainer.runtime().device;
      if (transport == "c10d") {
        trainer.join_run(network_exchange(*shared, config, exchange.run_id, "", device), false);
      } else {
        // The folder exchange: this worker's own (folder), or its group leader's (hybrid, made
        // when it becomes its group's rank 0, with its syncer).
        auto make_folder = [&syncer, shared, local, exchange]() mutable {
          if (!syncer) syncer = start_syncer(*shared, local);
          worker::Sidecar* sidecar = syncer.get();
          exchange.check_alive = [sidecar, local] {
            if (sidecar && !sidecar->running()) syncer_exited(*sidecar, local);
          };
          return exchange::make_folder_exchange(exchange);
        };
        if (transport == "folder") {
          trainer.join_run(make_folder(), shared->overlap);
        } else {
          GB_REQUIRE(!shared->c10d_group.empty(), "--transport hybrid: --c10d-group NAME is required (the group of "
                     "workers that reach each other over the network)");
          {  // any member may lead its group in the folder: a bad folder flag fails here, not then
            exchange::FolderExchangeConfig check = exchange;
            if (check.shard_count == 0) check.shard_count = 1;
            check.validate();
          }
          transport::HybridExchangeConfig hybrid{shared->c10d_group, make_folder};
          trainer.join_run(std::make_unique<transport::HybridExchange>(
                               network_exchange(*shared, config, exchange.run_id, shared->c10d_group, device),
                               std::move(hybrid)),
                           false);
        }
      }
    }
    std::signal(SIGINT, on_stop_signal);
    std::signal(SIGTERM, on_stop_signal);
    const int64_t stop_at = *stop_at_step;
    worker::Sidecar* sidecar = syncer.get();
    // Fault injection for the repair test: GRADBOX_FAULT_PERTURB_STEP=N nudges this replica's
    // parameters once, after step N, as a silent divergence (a bad GPU, a flipped bit) would.
    const char* perturb = std::getenv("GRADBOX_FAULT_PERTURB_STEP");
    int64_t perturb_step = perturb ? std::atoll(perturb) : -1;
    worker::TrainSummary summary = run_until_stopped(trainer, [&](int64_t step) {
      if (sidecar && !sidecar->running()) syncer_exited(*sidecar, local);
      if (step == perturb_step) {
        torch::NoGradGuard no_grad;
        trainer.flat().params().add_(1e-3);
        log::Logger("train").warn(str("GRADBOX_FAULT_PERTURB_STEP: parameters nudged after step ", step));
        perturb_step = -1;
      }
      return g_stop_signal != 0 || (stop_at > 0 && step >= stop_at);
    }, config.out_dir);
    if (syncer) syncer->stop();
    std::signal(SIGINT, SIG_DFL);
    std::signal(SIGTERM, SIG_DFL);
    log::Logger("train").info(str("done: steps ", summary.start_step, " -> ", summary.end_step, ", last loss ",
                                  summary.last_loss, ", val loss ", summary.last_val_loss, ", ",
                                  static_cast<int64_t>(summary.tokens_per_second), " tok/s, checkpoint ",
                                  summary.last_checkpoint.string()));
  });
}

}  // namespace gradbox::cli
