#include "cli/commands.h"
#include "common/error.h"

namespace gradbox::cli {

void add_export_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("export", "(not built yet)");
  cmd->callback([] { throw InputError("export: not built yet"); });
}

}  // namespace gradbox::cli
