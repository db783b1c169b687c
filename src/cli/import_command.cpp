#include "cli/commands.h"
#include "common/error.h"

namespace gradbox::cli {

void add_import_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("import", "(not built yet)");
  cmd->callback([] { throw InputError("import: not built yet"); });
}

}  // namespace gradbox::cli
