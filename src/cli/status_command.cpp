// gradbox status: who is in a run and how it goes, read from the shared folder's heartbeats.
#include "cli/commands.h"
#include "exchange/run_status.h"

#include <iostream>

namespace gradbox::cli {

void add_status_command(CLI::App& app) {
  CLI::App* cmd = app.add_subcommand("status", "Members of a many-worker run: state, round, tokens/s, loss, upload vs Drive's daily cap; newest checkpoint");
  auto shared = std::make_shared<std::string>();
  auto local = std::make_shared<std::string>();
  auto stale_after = std::make_shared<double>(120.0);
  cmd->add_option("--shared", *shared, "The run's shared folder (or a worker's <local>/inbox mirror of it)")->required();
  cmd->add_option("--local", *local, "A worker's local folder, to list its syncer's quarantined files");
  cmd->add_option("--stale-after", *stale_after, "Seconds without a heartbeat before a worker counts as stale")
      ->capture_default_str();
  cmd->callback([shared, local, stale_after] {
    std::cout << exchange::format_run_status(exchange::read_run_status(*shared, *stale_after, *local));
  });
}

}  // namespace gradbox::cli
