#pragma once
// Gradient exchange through a shared folder, as seen through the syncer's local mirror.
//
// Note [Round agreement]
// Each round r has its own folder rounds/r%08d/. The flat gradient is cut into S shards of
// contiguous elements. Shard k of round r has a deterministic owner per epoch e:
//     owner(k, e) = members[(k + r + e) mod N]       (members sorted by name)
// so ownership rotates with the round and fails over in a fixed order.
//
//   1. Every worker writes its contribution to each shard, once, under a unique name:
//        g-<worker>-s<k>-<token>.gbx   (GradientShard: tokens, loss, overflow, codec payload;
//                                       <token>: Note [Unpredictable names] in folder_names.h)
//   2. The epoch-0 owner waits until every member's contribution is there or its
//      contribution timeout passes, then publishes the agreement for the shard:
//        all-gather:  c-s<k>-e<e>-<owner>-<token>.gbx   (RoundCommit: the contributors, each
//                                                        pinned by file name and checksum)
//        sharded:     r-s<k>-e<e>-<owner>-<token>.gbx   (GradientShard reduced=true: the
//                                                        weighted average itself, with its contributors)
//   3. Everyone applies, per shard, the lowest-epoch agreement it sees. If none has appeared
//      e * failover_timeout after the round began (as seen from here), the epoch-e owner
//      publishes one, within its window (Note [Seeing the folder]). Owners take turns in this
//      order, and when a whole turn passes without an agreement, again (a few turns).
//
// Only the agreement decides who contributed, never each worker's own view; a slow owner and
// its successor can still both publish (the folder is eventually consistent), so replicas
// publish parameter fingerprints every K rounds and a mismatch is reported (and repaired in
// the elastic layer). Every replica decodes the same bytes and sums them in the same order
// (sorted by worker; token_weighted_sum.h), so identical inputs give bit-identical averages.
//
// Every worker also publishes its RunConfig (run_config_check.h); a peer whose settings differ
// is refused.
//
// Note [Elastic membership]
// Who is expected in round r (the view V_r) is itself agreed: shard 0's agreement of round r
// names V_r and V_{r+1}, so every replica that applied round r knows the owners of round r+1.
// The shard-0 owner builds V_{r+1} from
//   - the members of V_r that contributed to round r and did not announce "left", and
//   - followers whose newest heartbeat is fresh (--stale-after), says "ready" and shows them
//     caught up (applied round >= r - 2).
// A member that misses the contribution deadline is therefore out of the next view: a dead
// worker costs the others one deadline (one failover timeout if it owned a shard of the round;
// none for a worker that announced "left", or whose heartbeat went stale before it applied the
// round: its successor takes over at the deadline, so a line of dead owners costs the wait for
// their heartbeats to go stale, not a failover timeout each).
// A worker not in V_r follows: it waits for the round's agreements and applies them without
// contributing. Joiners and restarted workers start that way from the newest folder checkpoint
// (Note [Folder checkpoints] in folder_checkpoint.h), replay the rounds the folder keeps after
// it, publish "ready" once caught up, and are in a view a round or two later. Nobody waits for
// them. Round folders are kept back to the second-newest folder checkpoint for that replay.
// When nobody is live (every heartbeat stale or "left") a follower that has waited --stale-after
// for an agreement, and has the smallest name among the fresh followers, makes itself the view:
// the whole run resumes from where the folder's agreements end. (A follower that computed no
// gradient for that round agrees it empty: every replica skips it.)
//
// Heartbeats are judged by when they arrived here (on this machine's clock), never by the
// writer's clock: a session whose clock runs ahead and then dies goes stale like any other.
// Each heartbeat names its writer's incarnation, so two sessions under one name are told
// apart: a joiner that finds a fresh heartbeat of another session under its own name waits for
// it to go stale and refuses to start (InputError naming the name) if a newer one arrives; when
// two sessions with one name run at once, the one that started later stops.
//
// The contribution deadline adapts to the lags observed between this worker's contribution and
// its peers' (median + k * spread over recent rounds), within --deadline-floor and
// --contribution-timeout (the ceiling, used until enough lags are seen); changes are logged.
//
// Repair: after each fingerprint round, a replica whose checksum is held by a minority of the
// replicas that reported (ties: the group holding the smallest worker name wins) reloads the
// agreed state (RoundResult::resync), as does a follower whose next round is gone from the
// folder while a newer checkpoint exists. The agreed state is the newest folder checkpoint that
// no fingerprint comparison contradicts: not one whose checksum lost its round, nor one whose
// publisher had lost the comparison before it (it may have published before it knew).
//
// Note [A finished run's rounds]
// Round folders stay back to the oldest kept folder checkpoint, for a joiner's replay (Note
// [Elastic membership]). Once the run is over nobody will replay them: a worker that compared
// the last round (final_check) and leaves waits up to 30 s (on its clock) for a complete folder
// checkpoint of that round that no fingerprint contradicts, then withdraws its own files of
// every round older than --gc-window (its syncer deletes them from the folder on its way out)
// and forgets its mirror of the others'. What stays is the window and the checkpoints, so a
// longer run can resume from the final one. Without that checkpoint in time (a large one still
// uploading, its publisher killed) the rounds stay, as during the run: replay may need them.
//
// Note [Founders' own initial weights]
// A new run's first member publishes its step-0 state as the run's first folder checkpoint;
// the other founding members used to wait for it and fetch it (GPT-2-Large with DiLoCo: ~7.7
// GB up at 20 MB/s, then down, ten minutes or more of four idle sessions). Every worker builds
// the same initial weights from the same seed on the same torch, so each offers the checksum
// of its own step-0 state in its run config (FolderExchangeConfig::initial_state_checksum), and
// a founding member whose checksum equals one the first member's config offers starts from its
// own weights at once (JoinPlan::own_initial_state) and writes no step-0 checkpoint. A config
// offering another checksum (another torch build), none, or a checkpoint that lands first: the
// member fetches the checkpoint as before. Should a forged config make a founder start from
// other weights, the replicas' fingerprints disagree at the first comparison and the minority
// reloads the agreed state (Repair, above).
//
// Note [Late entry]
// With time-boxed DiLoCo rounds (--round-seconds) a round may last an hour, and a joiner that
// waited for the next view would idle through it. So (FolderExchangeConfig::late_entry) a
// follower that has applied round r-1 and said "ready" computes round r's inner steps from
// θ_g like everyone else and publishes its contribution as a guest: not in V_r, so no owner
// waits for it and it owns nothing, but an owner that agrees the round while a guest's
// contribution is there (checked like a member's, from a follower whose fresh beat says ready
// and caught up) pins it among the contributors, and the guest is then in V_{r+1} as a
// contributor. Its box closes with the round's: the shard-0 agreement of r-1 carries its
// owner's wall clock, and the guest's box counts from it (the members' boxes open when they
// applied it, a lag later, so the guest publishes no later than they do). A guest whose
// contribution comes too late has lost only its own steps. Replicas still agree: the
// agreement alone says who contributed.
//
// Note [Progress is a run of rounds]
// A worker whose round cannot be applied while the folder shows rounds past the next one has
// fallen behind (a blind spell, a pause): the others agreed its round and moved on, its files may
// be gone, so it reloads the agreed state, and it never decides that round itself (that would
// fork the run). A lone round folder is no proof of that: one planted or stray file in a round
// folder far ahead, then a member missing a round, and every survivor reloaded, landed on the
// round it left and reloaded again, forever. A run that moved on leaves a run of round folders
// (round r beside r-1, the garbage window's worth), so the folder's newest round is the newest
// folder whose round before is there too; a lone folder ahead is not the run's progress. Two
// folders planted side by side still are: who may write which files is the real fence.
//
// Note [Overlapped time-boxed rounds]
// --round-seconds S with --overlap-steps (FolderExchangeConfig::boxes_from_agreement): a worker
// sends round r-1's Δ when its box closes and computes round r's steps while r-1 is agreed;
// round r's box closes S after r-1's shard-0 agreement (its owner's clock), for members and
// late entrants alike. Without that anchor a worker's box would open at its own send, and one
// that started (or fell) behind would stay behind round after round, its Δ left out (what
// `gradbox simulate` showed for --overlap-steps alone). Anchored, every box closes together
// whatever the folder's lag, and no worker waits: the steps between a close and the next
// agreement belong to the next round. Hence an owner leaves nobody out before the common close
// plus contribution_timeout (RoundAgreement::leave_out_not_before): the wait costs no compute,
// only a later next close; a worker that closed early (its last step would overrun the box)
// is not cut for it. A member left out of a round enters the next one late (a "ready" beat)
// rather than idling through it.
//
// Note [Partial deltas]
// A session that dies without warning loses every inner step since its last Δ: with overlapped
// boxes of 40 minutes, 20 minutes of a T4 on average, the largest part of what a death costs.
// So (FolderExchangeConfig::partial_deltas, the trainer's --partial-every K) a member of round
// r publishes its Δ so far every K inner steps while its box is open, as
//     p-<worker>-s<k>-<token>.gbx      (GradientShard partial=true, tokens of the steps so far)
// which syncers fetch only on request. An owner about to agree the round without a member
// first asks for that member's partials and gives them one more contribution deadline (and two
// whole listings of the folder) to come down; then it pins the one with the most tokens in the
// member's place, marked partial, and every replica fetches and sums it like any contribution.
// A member whose partial stood in missed the deadline like one left out: it is out of the next
// view, and enters that round late if it is alive. Partials carry no error feedback (the
// residual belongs to the whole Δ; a dead worker's is lost anyway, and a late one has fed its
// whole Δ's into its residual: a small error, accepted). They are published only while the box
// is open and an owner leaves nobody out before the common close plus the contribution timeout,
// so a pinned partial is never replaced under an owner's feet; a newer partial takes back only
// older ones that have not landed (seen by nobody), and a worker takes back its own unpinned
// partials once it has applied their round. Only with overlapped time-boxed rounds, where the
// owner's wait costs no compute.
//
// Note [Live control]
// The run's control file <shared>/control.json (micro_batch, grad_accum, lr_multiplier,
// weight_decay, dropout; see live_control.h) is mirrored by the syncer. When a shard-0 owner
// sees its mirror change, its agreement for round r carries the new control with
// from_round = r + 2; every replica learns it with round r and switches before computing round
// r + 2 (also with --overlap), so all apply it at the same round. Every shard-0 agreement
// repeats the control in effect, so followers and restarted workers learn it too, and the
// trainer keeps it in its checkpoints. An owner that has not learned it yet (restarted, its
// mirror of control.json still on its way) says nothing rather than the flags' "{}".
//
// The parts (each its own file): RoundAgreement (one round as a step machine), MembershipViews
// and Heartbeats (who is expected, who is alive), ReplicaCheck (fingerprints and repair),
// RunConfigCheck, ControlAgreement (live control), CheckpointDuty (folder checkpoints) and
// collect_round_garbage, all over one ExchangeContext. They reach the shared folder and time
// only through the seam (Note [The seam] in mirror/mirror.h); FolderExchange is the facade the
// trainer sees, and owns the waiting.
//
// Note [Seeing the folder]
// A worker that cannot see the shared folder (an unmounted Drive, a network outage, a blocked
// upload) must not decide anything alone: to everyone else it has vanished, and they decide
// without it. So (1) an owner agrees a round without a missing contribution only after the
// syncer has completed two whole listings of the folder since the round began (a cut-off
// worker's listings stop); (2) a worker applies its own agreement only once it has landed in
// the shared folder, where the others can see it; (3) an owner publishes epoch e's agreement
// only within its epoch's window (it closes when the next owner's opens), so an owner that
// comes back late never competes with its successor; and (4) a follower resumes a run alone
// only while it sees the folder. What is left (a late owner and its successor crossing near a
// window's edge) is found by fingerprints, compared across everyone who publishes them, and
// repaired.
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "exchange/exchange_config.h"
#include "exchange/folder_names.h"
#include "exchange/gradient_exchange.h"
#include "mirror/clock.h"
#include "mirror/mirror.h"

namespace gradbox::exchange {

// A real run's exchange: the worker's local folder (config.local_dir) kept in step with the
// shared folder by gradbox-sync, and the system clock.
std::unique_ptr<GradientExchange> make_folder_exchange(FolderExchangeConfig config);
// Over any mirror and clock (the simulator's); both must outlive the exchange.
std::unique_ptr<GradientExchange> make_folder_exchange(FolderExchangeConfig config, mirror::Mirror& mirror,
                                                       mirror::Clock& clock);

}  // namespace gradbox::exchange
