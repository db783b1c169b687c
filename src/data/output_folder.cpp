#include "data/output_folder.h"

#include <unistd.h>

#include <system_error>

#include "common/atomic_file.h"
#include "common/error.h"
#include "data/dataset_meta.h"

namespace gradbox::data {

namespace fs = std::filesystem;

namespace {

// The names a prepared folder consists of (besides meta.json).
constexpr const char* kDatasetNames[] = {"train.bin", "val.bin", "report.json", "tokenizer"};

bool is_stray_temp(const std::string& name) {
  return name.find(".tmp.") != std::string::npos;  // AtomicFileWriter and scratch folders
}

void remove_path(const fs::path& path) {
  std::error_code ec;
  fs::remove_all(path, ec);
  GB_REQUIRE(!ec, path.string(), ": cannot remove: ", ec.message());
}

}  // namespace

OutputFolder::OutputFolder(fs::path dir, Overwrite overwrite) : dir_(std::move(dir)) {
  GB_REQUIRE(!dir_.empty(), "--out: no output folder given");
  std::error_code ec;
  const fs::file_status status = fs::status(dir_, ec);
  if (fs::exists(status)) {
    GB_REQUIRE(fs::is_directory(status), "--out ", dir_.string(),
               ": exists and is not a directory");
    const bool empty = fs::is_empty(dir_, ec);
    GB_REQUIRE(!ec, "--out ", dir_.string(), ": cannot list: ", ec.message());
    if (!empty) {
      const bool is_dataset = fs::exists(dir_ / kMetaFile, ec);
      GB_REQUIRE(overwrite == Overwrite::force, "--out ", dir_.string(), ": folder is not empty",
                 is_dataset ? " (it holds a prepared dataset)" : "",
                 "; pass --force to replace the dataset in it");
      // The commit point goes first: from here on the folder is not a dataset.
      if (is_dataset) {
        remove_path(dir_ / kMetaFile);
        fsync_dir(dir_);
      }
      for (const char* name : kDatasetNames) remove_path(dir_ / name);
      for (const auto& entry : fs::directory_iterator(dir_)) {
        if (is_stray_temp(entry.path().filename().string())) remove_path(entry.path());
      }
    }
  } else {
    fs::create_directories(dir_, ec);
    GB_REQUIRE(!ec, "--out ", dir_.string(), ": cannot create: ", ec.message());
    created_dir_ = true;
  }
  scratch_ = dir_ / str(".prepare.tmp.", ::getpid());
  fs::create_directory(scratch_, ec);
  GB_REQUIRE(!ec, "--out ", dir_.string(), ": cannot create ", scratch_.string(), ": ",
             ec.message());
}

OutputFolder::~OutputFolder() {
  // Best effort: this runs while an exception is on its way to main, which reports it.
  std::error_code ec;
  fs::remove_all(scratch_, ec);
  if (committed_) return;
  for (const std::string& name : tracked_) fs::remove_all(dir_ / name, ec);
  if (created_dir_ && fs::is_empty(dir_, ec)) fs::remove(dir_, ec);
}

void OutputFolder::track(const std::string& name) { tracked_.push_back(name); }

void OutputFolder::install_dir(const fs::path& from, const std::string& name) {
  const fs::path to = dir_ / name;
  remove_path(to);
  std::error_code ec;
  fs::rename(from, to, ec);
  GB_REQUIRE(!ec, to.string(), ": cannot move ", from.string(), " here: ", ec.message());
  track(name);
  fsync_dir(dir_);
}

void OutputFolder::commit(std::string_view meta_json) {
  GB_CHECK(!committed_, "double commit of ", dir_);
  write_file_atomic(dir_ / kMetaFile, meta_json);
  committed_ = true;
  std::error_code ec;
  fs::remove_all(scratch_, ec);
}

}  // namespace gradbox::data
