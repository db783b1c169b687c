// gradbox plot: PNG plots of runs from their metrics.jsonl. The plotting is matplotlib (the
// library Colab and Kaggle preinstall) in scripts/plot_run.py; this command finds that script
// and an interpreter and hands over, so `gradbox plot` works wherever the notebooks run.
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "common/error.h"
#include "worker/sidecar.h"

namespace gradbox::cli {
namespace fs = std::filesystem;
namespace {

// The script beside the executable's source tree (a build), or installed beside the binary.
fs::path plot_script() {
  if (const char* env = std::getenv("GRADBOX_PLOT_SCRIPT")) return env;
  const fs::path installed = worker::sibling_executable("plot_run.py");
  if (fs::exists(installed)) return installed;
  return fs::path(GRADBOX_SOURCE_DIR) / "scripts" / "plot_run.py";
}

}  // namespace

void add_plot_command(CLI::App& app) {
  CLI::App* cmd = app.add_subcommand("plot", "PNG plots of runs: loss, tokens/s, exchange per round, membership");
  auto runs = std::make_shared<std::vector<std::string>>();
  auto out = std::make_shared<std::string>();
  auto python = std::make_shared<std::string>();
  cmd->add_option("--run", *runs, "A worker's --out folder (repeat for one line per worker)")->required();
  cmd->add_option("--out", *out, "Folder for the PNG files (default: <first run>/plots)");
  cmd->add_option("--python", *python, "Interpreter with matplotlib (default: $GRADBOX_PYTHON, else the one gradbox was built against, else python3)");
  cmd->callback([runs, out, python] {
    const fs::path script = plot_script();
    GB_REQUIRE(fs::exists(script), script.string(), ": the plotting script is missing (set GRADBOX_PLOT_SCRIPT)");
    std::string interpreter = *python;
    if (interpreter.empty() && std::getenv("GRADBOX_PYTHON")) interpreter = std::getenv("GRADBOX_PYTHON");
    if (interpreter.empty() && fs::exists(GRADBOX_BUILD_PYTHON)) interpreter = GRADBOX_BUILD_PYTHON;
    if (interpreter.empty()) interpreter = "python3";
    std::vector<std::string> args = {interpreter, script.string()};
    for (const std::string& run : *runs) args.insert(args.end(), {"--run", run});
    args.insert(args.end(), {"--out", out->empty() ? (fs::path(runs->front()) / "plots").string() : *out});
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    ::execvp(argv[0], argv.data());
    throw InputError(str("--python ", interpreter, ": cannot run it: ", std::strerror(errno)));
  });
}

}  // namespace gradbox::cli
