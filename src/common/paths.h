#pragma once
#include <filesystem>

namespace gradbox {

// Whether `path` is `folder` or lies below it, after resolving "..", symbolic links and
// relative paths as far as the file system has them (`path` need not exist yet). An empty
// folder holds nothing.
bool is_within(const std::filesystem::path& path, const std::filesystem::path& folder);

}  // namespace gradbox
