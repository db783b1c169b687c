#include "cli/commands.h"
#include "common/error.h"

namespace gradbox::cli {

void add_train_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("train", "(not built yet)");
  cmd->callback([] { throw InputError("train: not built yet"); });
}

}  // namespace gradbox::cli
