// gradbox: one executable, one subcommand per job. This file only parses the command line,
// sets up logging and maps exceptions to exit codes; the work lives in the libraries.
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <iostream>
#include <string>

#include "cli/commands.h"
#include "common/broken_pipe.h"
#include "common/kept_heap.h"
#include "common/disk_space.h"
#include "common/error.h"
#include "common/log.h"
#include "worker/sidecar.h"

namespace {

// `gradbox sync ...` is the torch-free gradbox-sync program: exec it rather than keep
// LibTorch's few hundred MB mapped in a process that only copies files.
int exec_syncer(int argc, char** argv) {
  const std::string path = gradbox::worker::sibling_executable("gradbox-sync").string();
  std::string name = "gradbox-sync";
  argv[1] = name.data();
  ::execv(path.c_str(), argv + 1);
  std::cerr << "gradbox: error: cannot run " << path << ": " << std::strerror(errno) << "\n";
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  // Before any thread pool starts: idle OpenMP threads must sleep, not spin, or several
  // workers on one machine steal each other's cores (a step measured 2.6x slower).
  ::setenv("OMP_WAIT_POLICY", "PASSIVE", /*overwrite=*/0);
  gradbox::survive_broken_pipes();  // Note [A broken pipe is an error, not a death]
  gradbox::keep_freed_heap_memory();  // Note [Freed memory is kept]
  if (argc >= 2 && std::string(argv[1]) == "sync") return exec_syncer(argc, argv);

  CLI::App app{"gradbox: train language models on machines that share only a folder"};
  app.require_subcommand(1);
  app.set_help_all_flag("--help-all", "Help for every subcommand");
  std::string log_level = "info";
  app.add_option("--log-level", log_level, "debug, info, warn or error")->capture_default_str();
  app.parse_complete_callback([&] { gradbox::log::setup(gradbox::log::parse_level(log_level)); });

  gradbox::cli::add_prepare_command(app);
  gradbox::cli::add_train_command(app);
  gradbox::cli::add_sample_command(app);
  gradbox::cli::add_export_command(app);
  gradbox::cli::add_import_command(app);
  gradbox::cli::add_status_command(app);
  gradbox::cli::add_simulate_command(app);
  gradbox::cli::add_plot_command(app);
  gradbox::cli::add_secret_command(app);
  // Listed for --help only: main() hands `gradbox sync ...` to gradbox-sync before parsing.
  app.add_subcommand("sync", "Mirror a shared folder for one worker (runs gradbox-sync; see gradbox sync --help)");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const gradbox::InputError& e) {
    std::cerr << "gradbox: error: " << e.what() << "\n";
    return 2;
  } catch (const gradbox::SystemFault& e) {
    std::cerr << "gradbox: error: " << e.what() << "\n";
    return 1;
  } catch (const std::exception& e) {
    if (gradbox::is_disk_full(e)) {  // from a library that reports it its own way (std::filesystem)
      std::cerr << "gradbox: error: the disk is full: " << e.what() << "\n";
      return 1;
    }
    std::cerr << "gradbox: internal error: " << e.what() << "\n";
    return 70;
  }
  return 0;
}
