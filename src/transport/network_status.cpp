#include "transport/network_status.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/atomic_file.h"
#include "common/error.h"

namespace gradbox::transport {
namespace {
// A live worker rewrites its file every few seconds while rounds go on.
constexpr double kSilentAfterS = 60;
}  // namespace

std::string format_network_status(const std::filesystem::path& store_dir, int64_t now_unix_ms) {
  const std::filesystem::path dir = store_dir / "status";
  if (!std::filesystem::is_directory(dir)) return "";
  std::map<std::string, std::vector<nlohmann::json>> runs;  // sorted by run, then worker
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (entry.path().extension() != ".json") continue;
    try {
      nlohmann::json j = nlohmann::json::parse(read_file(entry.path()));
      runs[j.at("run").get<std::string>()].push_back(std::move(j));
    } catch (const std::exception& e) {
      runs["?"].push_back({{"worker", entry.path().filename().string()}, {"error", e.what()}});
    }
  }
  std::string out = str("network transport (c10d) in ", store_dir.string(), "\n");
  for (auto& [run, workers] : runs) {
    std::sort(workers.begin(), workers.end(),
              [](const nlohmann::json& a, const nlohmann::json& b) { return a.value("worker", "") < b.value("worker", ""); });
    // The group as its most recent epoch says.
    const nlohmann::json* newest = nullptr;
    for (const nlohmann::json& w : workers)
      if (w.contains("epoch") && (!newest || w["epoch"].get<uint64_t>() > (*newest)["epoch"].get<uint64_t>())) newest = &w;
    out += str("  run ", run);
    if (newest) {
      std::string members;
      for (const auto& m : (*newest)["members"]) {
        if (!members.empty()) members += ',';
        members += m.get<std::string>();
      }
      out += str(": ", (*newest)["backend"].get<std::string>(), ", group epoch ", (*newest)["epoch"].get<uint64_t>(),
                 ": ", members.empty() ? "(none)" : members);
    }
    out += "\n";
    char line[160];
    std::snprintf(line, sizeof line, "    %-12s %6s %8s %-7s %9s %7s %6s %10s %9s %9s\n", "worker", "epoch", "round",
                  "state", "streamed", "regroups", "redone", "held", "forming s", "updated");
    out += line;
    for (const nlohmann::json& w : workers) {
      if (w.contains("error")) {
        out += str("    ", w["worker"].get<std::string>(), ": unreadable (", w["error"].get<std::string>(), ")\n");
        continue;
      }
      const double age = static_cast<double>(now_unix_ms - w["updated_unix_ms"].get<int64_t>()) / 1000.0;
      std::snprintf(line, sizeof line, "    %-12s %6llu %8llu %-7s %9llu %9llu %7llu %6llu %10.1f %7.0f s\n",
                    w["worker"].get<std::string>().c_str(), static_cast<unsigned long long>(w["epoch"].get<uint64_t>()),
                    static_cast<unsigned long long>(w["round"].get<uint64_t>()), w["left"].get<bool>() ? "left" : age > kSilentAfterS ? "silent" : "in",
                    static_cast<unsigned long long>(w.value("rounds_streamed", uint64_t{0})),
                    static_cast<unsigned long long>(w["epochs_formed"].get<uint64_t>() - 1),
                    static_cast<unsigned long long>(w["rounds_redone"].get<uint64_t>()),
                    static_cast<unsigned long long>(w["rounds_completed_from_held_data"].get<uint64_t>()),
                    w["seconds_regrouping"].get<double>(), age);
      out += line;
    }
  }
  out += "  (streamed: rounds whose buckets went out during backward; regroups: epochs this worker formed after its first; redone / held: rounds a failure interrupted, "
         "all-reduced again / completed from the data every member held; forming s: seconds spent forming epochs; "
         "silent: no update for a minute)\n";
  return out;
}

}  // namespace gradbox::transport
