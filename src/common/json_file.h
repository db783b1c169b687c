#pragma once
// Reads a JSON file; a missing file or bad JSON is an InputError naming the file.
#include <filesystem>

#include <nlohmann/json.hpp>

namespace gradbox {

nlohmann::json read_json_file(const std::filesystem::path& path);

}  // namespace gradbox
