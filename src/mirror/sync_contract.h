#pragma once
// Note [The syncer contract]
// The one place that spells out how a worker and its syncer (gradbox-sync) share the worker's
// local disk. The exchange (through DiskMirror), the syncer, the sidecar launcher and the tests
// all use these names; nothing else hard-codes them.
//
//   LOCAL/outbox/<rel>          the worker publishes <rel>, atomically (temp names contain ".tmp");
//                               the syncer uploads it once to SHARED/<rel>, never overwriting;
//   LOCAL/outbox/<rel>.sent     then writes this marker: "<rel> has landed in the shared folder".
//                               <rel> gone but .sent present: the worker withdrew it, so the
//                               syncer deletes SHARED/<rel>, then the marker.
//   LOCAL/inbox/<rel>           a peer's file, copied under a temp name and verified whole
//   LOCAL/inbox/<rel>.flag      before the rename; the flag is written last. Workers read only
//                               flagged files. Own files (ever in the outbox) are never mirrored.
//   LOCAL/requests/<rel>        on-demand files (names starting with an on-demand prefix) are
//                               fetched only once the worker creates this (empty) file, or a
//                               file whose name is a prefix of <rel>'s name in the same folder
//                               (names end in unpredictable tokens: Note [Unpredictable names]).
//   LOCAL/quarantine/<rel>      bytes that never verified.
//   LOCAL/recycled/<pid>.<n>    the worker's withdrawn files, kept to be written over
//                               (Note [Recycled files] in disk_mirror.cpp); the syncer never
//                               looks there.
//   LOCAL/inbox/control.json    SHARED/control.json, the one file edited in place (by hand).
//   exit status 28              the local disk is full (Note [A full disk] in
//                               common/disk_space.h): the syncer could not write under LOCAL.
//   LOCAL/syncer/stats.json     the syncer's counters; "settled_passes" counts whole listings
//                               of the shared folder whose downloads were all tried. It does not
//                               advance while the shared folder cannot be listed.
// Torch- and protobuf-free, header only.
#include <string_view>

namespace gradbox::mirror {

inline constexpr std::string_view kOutboxDir = "outbox";
inline constexpr std::string_view kInboxDir = "inbox";
inline constexpr std::string_view kRequestsDir = "requests";
inline constexpr std::string_view kQuarantineDir = "quarantine";
inline constexpr std::string_view kRecycledDir = "recycled";
inline constexpr std::string_view kSyncerStatsFile = "syncer/stats.json";
inline constexpr std::string_view kSyncerLogFile = "syncer.log";
inline constexpr std::string_view kSentSuffix = ".sent";
inline constexpr std::string_view kFlagSuffix = ".flag";
inline constexpr std::string_view kTempMarker = ".tmp";
inline constexpr std::string_view kControlFile = "control.json";
// gradbox-sync's exit status when the local disk is full (ENOSPC's number, for the memory).
inline constexpr int kSyncerExitLocalDiskFull = 28;
// A control file is a few hundred bytes of hand-written JSON; a bigger one is not mirrored.
inline constexpr uint64_t kMaxControlBytes = 64 << 10;

// File-name prefixes that are fetched only on request: contributions (a sharded round's only by
// its shard's owner, an all-gather round's by every replica that applies it, and nobody's from
// before it joined), partial DiLoCo deltas (only when one stands in for a worker that died:
// Note [Partial deltas] in exchange/folder_exchange.h) and checkpoint parts (only a worker
// that loads the checkpoint).
inline constexpr std::string_view kContributionPrefix = "g-";
inline constexpr std::string_view kPartialPrefix = "p-";
inline constexpr std::string_view kCheckpointPartPrefix = "part-";

// A folder checkpoint's part (checkpoints/<checkpoint>/part-NNNN.gbx): background traffic. A
// syncer uploads one at a time, after everything else it has to send, so that a round's file
// never queues behind a 15 GB checkpoint (Note [Upload order] in syncer/syncer.h).
inline bool is_checkpoint_part(std::string_view rel) {
  const size_t slash = rel.rfind('/');
  const std::string_view name = slash == std::string_view::npos ? rel : rel.substr(slash + 1);
  return rel.starts_with("checkpoints/") && name.starts_with(kCheckpointPartPrefix);
}

}  // namespace gradbox::mirror
