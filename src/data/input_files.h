#pragma once
// The list of files `prepare` reads, from the --input arguments.
#include <filesystem>
#include <string>
#include <vector>

namespace gradbox::data {

// Files are taken as given; directories are walked recursively and their files sorted by path
// (byte order), so the same inputs always give the same documents in the same order. In a walk,
// hidden entries (".name"), non-regular files, symlinked directories, and fortune's index files
// (X.dat and X.u8 beside a file X) are skipped. "-" stands for standard input. Throws
// InputError naming the first path that does not exist, or an input that holds no files.
std::vector<std::filesystem::path> resolve_inputs(const std::vector<std::string>& inputs);

}  // namespace gradbox::data
