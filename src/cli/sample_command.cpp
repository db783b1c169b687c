#include "cli/commands.h"
#include "common/error.h"

namespace gradbox::cli {

void add_sample_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("sample", "(not built yet)");
  cmd->callback([] { throw InputError("sample: not built yet"); });
}

}  // namespace gradbox::cli
