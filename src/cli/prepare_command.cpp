#include "cli/commands.h"
#include "common/error.h"

namespace gradbox::cli {

void add_prepare_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("prepare", "(not built yet)");
  cmd->callback([] { throw InputError("prepare: not built yet"); });
}

}  // namespace gradbox::cli
