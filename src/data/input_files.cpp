#include "data/input_files.h"

#include <algorithm>
#include <system_error>

#include "common/error.h"

namespace gradbox::data {

namespace fs = std::filesystem;

namespace {

// strfile(1) writes X.dat next to the fortune file X; Debian adds X.u8 (a link to X).
bool is_fortune_index(const fs::path& path) {
  const std::string ext = path.extension().string();
  if (ext != ".dat" && ext != ".u8") return false;
  std::error_code ec;
  fs::path base = path;
  base.replace_extension();
  return fs::is_regular_file(base, ec);
}

void walk(const fs::path& dir, std::vector<fs::path>& files) {
  std::vector<fs::path> found;
  std::error_code ec;
  fs::recursive_directory_iterator it(dir, fs::directory_options::none, ec);
  GB_REQUIRE(!ec, "--input ", dir.string(), ": cannot list: ", ec.message());
  for (fs::recursive_directory_iterator end; it != end; it.increment(ec)) {
    GB_REQUIRE(!ec, "--input ", dir.string(), ": cannot list: ", ec.message());
    const fs::path& path = it->path();
    if (path.filename().string().starts_with(".")) {
      if (it->is_directory(ec)) it.disable_recursion_pending();
      continue;
    }
    if (!it->is_regular_file(ec) || is_fortune_index(path)) continue;
    found.push_back(path);
  }
  std::sort(found.begin(), found.end(),
            [](const fs::path& a, const fs::path& b) { return a.native() < b.native(); });
  files.insert(files.end(), found.begin(), found.end());
}

}  // namespace

std::vector<fs::path> resolve_inputs(const std::vector<std::string>& inputs) {
  GB_REQUIRE(!inputs.empty(), "--input: no input given");
  std::vector<fs::path> files;
  for (const std::string& input : inputs) {
    if (input == "-") {
      files.emplace_back("-");
      continue;
    }
    const fs::path path(input);
    std::error_code ec;
    const fs::file_status status = fs::status(path, ec);
    GB_REQUIRE(fs::exists(status), "--input ", input, ": no such file or directory");
    if (fs::is_directory(status)) {
      const size_t before = files.size();
      walk(path, files);
      GB_REQUIRE(files.size() > before, "--input ", input, ": directory holds no files");
    } else {
      files.push_back(path);
    }
  }
  GB_REQUIRE(std::count(files.begin(), files.end(), fs::path("-")) <= 1,
             "--input: '-' (standard input) given more than once");
  return files;
}

}  // namespace gradbox::data
