#pragma once
// The `gradbox` subcommands. Each adds itself to the app with its flags and a callback that
// runs it; callbacks throw gradbox::InputError on bad input, and main() maps that to exit 2.
#include <CLI/CLI.hpp>

namespace gradbox::cli {

void add_prepare_command(CLI::App& app);
void add_train_command(CLI::App& app);
void add_sample_command(CLI::App& app);
void add_export_command(CLI::App& app);
void add_import_command(CLI::App& app);
void add_status_command(CLI::App& app);
void add_simulate_command(CLI::App& app);
void add_plot_command(CLI::App& app);
void add_secret_command(CLI::App& app);

}  // namespace gradbox::cli
