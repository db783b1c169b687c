#pragma once
// Note [prepared folder protocol]
// `gradbox prepare` writes into its output folder so that a failure at any point leaves no
// half-written file under a final name and nothing that looks like a dataset:
//  - scratch files live in DIR/.prepare.tmp.<pid>/, token files are written as
//    DIR/train.bin.tmp.<pid>.<n> and renamed when complete (AtomicFileWriter);
//  - meta.json is written last, atomically: it is the commit point, and a folder without it
//    is not a dataset (read_dataset_info refuses it);
//  - if the run fails before the commit, everything it put under a final name is removed
//    again, the scratch folder goes, and a folder the run created itself is removed if empty.
// An existing non-empty folder is refused unless --force. With --force, the old meta.json is
// removed first (so the old dataset stops being one before any of its files change), then the
// old train.bin, val.bin, report.json, tokenizer/ and stray temp files of an earlier crashed
// run; other files in the folder are left alone.
// Two runs writing the same folder at once are not guarded against.
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

namespace gradbox::data {

enum class Overwrite : uint8_t { refuse, force };

class OutputFolder {
 public:
  // Checks, clears (with force) or creates the folder and the scratch folder. InputError
  // naming --out when the folder cannot be used.
  OutputFolder(std::filesystem::path dir, Overwrite overwrite);
  ~OutputFolder();
  OutputFolder(const OutputFolder&) = delete;
  OutputFolder& operator=(const OutputFolder&) = delete;

  const std::filesystem::path& dir() const { return dir_; }
  const std::filesystem::path& scratch() const { return scratch_; }

  // Records a name this run has committed under DIR, to remove it again if the run fails.
  void track(const std::string& name);
  // Moves a folder written under the scratch folder to DIR/name (replacing an old one).
  void install_dir(const std::filesystem::path& from, const std::string& name);
  // Writes meta.json atomically (the commit point) and removes the scratch folder.
  void commit(std::string_view meta_json);

 private:
  std::filesystem::path dir_;
  std::filesystem::path scratch_;
  bool created_dir_ = false;
  bool committed_ = false;
  std::vector<std::string> tracked_;
};

}  // namespace gradbox::data
