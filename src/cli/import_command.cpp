// gradbox import: a Hugging Face folder becomes a run folder that `gradbox train` continues.
#include "cli/commands.h"
#include "common/error.h"
#include "common/log.h"
#include "worker/model_loader.h"

namespace gradbox::cli {

void add_import_command(CLI::App& app) {
  CLI::App* cmd = app.add_subcommand("import", "Make a run folder from a Hugging Face model folder (to continue training or fine-tune)");
  struct Options {
    std::string from;
    std::string out;
  };
  auto o = std::make_shared<Options>();
  cmd->add_option("--from", o->from, "Hugging Face folder (config.json + model.safetensors + tokenizer files)")->required();
  cmd->add_option("--out", o->out, "Run folder to create")->required();
  cmd->callback([o] {
    worker::import_to_run(o->from, o->out);
    log::Logger("import").info(str("imported ", o->from, " into ", o->out, "; continue with: gradbox train --out ",
                                   o->out, " --model ", o->out, "/model_config.json --data DATA"));
  });
}

}  // namespace gradbox::cli
