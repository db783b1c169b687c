#pragma once
// Garbage: rounds more than gc_window behind the newest applied one are done. This worker
// withdraws its own files of them (the syncer deletes the shared copies) and forgets its mirror
// of everyone else's, except what a joiner replays after the oldest kept folder checkpoint.
// Torch- and protobuf-free.
#include <cstdint>
#include <optional>

#include "mirror/mirror.h"

namespace gradbox::exchange {

// Returns the oldest round kept.
uint64_t collect_round_garbage(mirror::Mirror& mirror, uint64_t applied_round, int64_t gc_window,
                               std::optional<uint64_t> replay_floor);

}  // namespace gradbox::exchange
