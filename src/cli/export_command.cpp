// gradbox export: a run or checkpoint as a Hugging Face folder (config.json + model.safetensors
// + tokenizer files) that the transformers library loads with no conversion.
#include <unistd.h>

#include "cli/commands.h"
#include "common/atomic_file.h"
#include "common/error.h"
#include "common/log.h"
#include "model/hf.h"
#include "tokenizer/tokenizer.h"
#include "worker/model_loader.h"

namespace gradbox::cli {

void add_export_command(CLI::App& app) {
  CLI::App* cmd = app.add_subcommand("export", "Write a run or checkpoint as a Hugging Face model folder");
  struct Options {
    std::string from;
    std::string out;
    bool force = false;
  };
  auto o = std::make_shared<Options>();
  cmd->add_option("--from", o->from, "Run folder or checkpoint folder")->required();
  cmd->add_option("--out", o->out, "Folder to create")->required();
  cmd->add_flag("--force", o->force, "Replace an existing folder");
  cmd->callback([o] {
    const std::filesystem::path out = o->out;
    GB_REQUIRE(o->force || !std::filesystem::exists(out) || std::filesystem::is_empty(out), "--out ", out.string(),
               ": exists and is not empty (use --force to replace it)");
    worker::LoadedModel loaded = worker::load_model(o->from);
    // Written beside the target and renamed into place: never a half-written model folder.
    const std::filesystem::path temp = out.string() + str(".tmp.", ::getpid());
    std::filesystem::remove_all(temp);
    std::filesystem::create_directories(temp);
    try {
      model::export_hf(*loaded.model, temp);
      if (std::filesystem::exists(loaded.tokenizer_dir))
        tokenizer::load_tokenizer(loaded.tokenizer_dir)->save_hf(temp);
      std::filesystem::remove_all(out);
      std::filesystem::rename(temp, out);
      fsync_dir(out.has_parent_path() ? out.parent_path() : std::filesystem::path("."));
    } catch (...) {
      std::filesystem::remove_all(temp);
      throw;
    }
    log::Logger("export").info(str("exported ", loaded.source.string(), " to ", out.string()));
  });
}

}  // namespace gradbox::cli
