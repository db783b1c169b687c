#include "exchange/round_gc.h"

#include <algorithm>

#include "exchange/folder_names.h"

namespace gradbox::exchange {

uint64_t collect_round_garbage(mirror::Mirror& mirror, uint64_t applied_round, int64_t gc_window,
                               std::optional<uint64_t> replay_floor) {
  if (applied_round <= static_cast<uint64_t>(gc_window)) return 0;
  uint64_t limit = applied_round - static_cast<uint64_t>(gc_window);  // rounds < limit go
  if (replay_floor) limit = std::min<uint64_t>(limit, *replay_floor + 1);
  for (const std::string& dir : mirror.list_dirs("rounds")) {
    const std::optional<uint64_t> round = parse_round_dir(dir);
    if (!round || *round >= limit) continue;
    mirror.withdraw("rounds/" + dir);
    mirror.forget("rounds/" + dir);
  }
  return limit;
}

}  // namespace gradbox::exchange
