#include "common/paths.h"

#include <algorithm>

namespace gradbox {

bool is_within(const std::filesystem::path& path, const std::filesystem::path& folder) {
  if (folder.empty()) return false;
  std::error_code ec;  // weakly_canonical falls back to the lexical form where it cannot look
  const std::filesystem::path f = std::filesystem::weakly_canonical(std::filesystem::absolute(folder), ec);
  const std::filesystem::path p = std::filesystem::weakly_canonical(std::filesystem::absolute(path), ec);
  // A trailing separator makes an empty last element; it names no deeper folder.
  auto f_end = f.end();
  if (f_end != f.begin() && std::prev(f_end)->empty()) --f_end;
  return std::mismatch(f.begin(), f_end, p.begin(), p.end()).first == f_end;
}

}  // namespace gradbox
