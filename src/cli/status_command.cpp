// gradbox status: who is in a run and how it goes, read from the shared folder's heartbeats.
#include "cli/commands.h"
#include "common/error.h"
#include "exchange/run_status.h"
#include "mirror/clock.h"
#include "transport/network_status.h"

#include <iostream>
#include <optional>

namespace gradbox::cli {

void add_status_command(CLI::App& app) {
  CLI::App* cmd = app.add_subcommand("status", "Members of a many-worker run: state, round, tokens/s, loss, upload vs Drive's daily cap; newest checkpoint; network groups");
  auto shared = std::make_shared<std::string>();
  auto local = std::make_shared<std::string>();
  auto stale_after = std::make_shared<double>(0.0);
  cmd->add_option("--shared", *shared, "The run's shared folder (or a worker's <local>/inbox mirror of it)")->required();
  cmd->add_option("--local", *local, "A worker's local folder, to list its syncer's quarantined files");
  cmd->add_option("--stale-after", *stale_after,
                  str("Seconds without a heartbeat before a worker counts as stale (0: the run's --stale-after, ",
                      exchange::kStatusStaleAfterS, " where its run configs do not say)"))
      ->capture_default_str();
  auto cap_gb = std::make_shared<double>(static_cast<double>(exchange::kDailyUploadCap) / 1e9);
  cmd->add_option("--upload-cap-gb", *cap_gb, "Each worker's daily upload cap, GB (Drive: 750 per account)")
      ->capture_default_str();
  auto c10d_store = std::make_shared<std::string>();
  cmd->add_option("--c10d-store", *c10d_store,
                  "A hybrid group's --c10d-store folder, to show its group (--transport c10d: <shared>/c10d, shown anyway)");
  cmd->callback([shared, local, stale_after, c10d_store, cap_gb] {
    GB_REQUIRE(*cap_gb > 0, "--upload-cap-gb ", *cap_gb, ": must be positive");
    GB_REQUIRE(*stale_after >= 0, "--stale-after ", *stale_after, ": must be 0 (the run's) or positive");
    const std::optional<double> stale = *stale_after > 0 ? std::optional<double>(*stale_after) : std::nullopt;
    std::cout << exchange::format_run_status(
        exchange::read_run_status(*shared, stale, *local, static_cast<uint64_t>(*cap_gb * 1e9)));
    const int64_t now = mirror::system_clock().unix_ms();
    std::cout << transport::format_network_status(std::filesystem::path(*shared) / "c10d", now);
    if (!c10d_store->empty()) std::cout << transport::format_network_status(*c10d_store, now);
  });
}

}  // namespace gradbox::cli
