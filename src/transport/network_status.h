#pragma once
// `gradbox status` for the network transports: the status files each worker of a c10d group
// keeps beside the group's store (<store dir>/status/<run>.<worker>.json): its group epoch and
// members, its round, and the fallbacks it went through (epochs re-formed after a failure,
// rounds redone or completed from held data). Torch-free.
#include <filesystem>
#include <string>

namespace gradbox::transport {

// "" when the folder holds no status files.
std::string format_network_status(const std::filesystem::path& store_dir, int64_t now_unix_ms);

}  // namespace gradbox::transport
