// Live control through the agreements (Note [Live control] in folder_exchange.h): what a shard-0
// owner writes into its agreement, in virtual time over the simulated folder.
#include <gtest/gtest.h>

#include <optional>
#include <string>

#include "exchange/control_agreement.h"
#include "exchange/exchange_context.h"
#include "mirror/memory_mirror.h"
#include "mirror/virtual_clock.h"
#include "wire/envelope.h"

namespace gradbox::exchange {
namespace {

const std::string kHalfLr = R"({"lr_multiplier":0.5})";

wire::RoundView view_with(const AgreedControl& control) {
  wire::RoundView view;
  view.add_members("owner");
  view.set_control_json(control.json);
  view.set_control_from_round(control.from_round);
  view.set_control_version(control.version);
  return view;
}

// A restarted worker that owns shard 0 before its mirror holds control.json (found as a CI
// flake: a lone restart undid the run's lr_multiplier) must not write the flags' "{}" into its
// agreement: every replica would learn it and drop the control. It says nothing until it knows,
// and once the file reaches its mirror it proposes what the file says.
TEST(ControlAgreement, AnOwnerThatHasNotLearnedTheControlSaysNothingRatherThanUndoingIt) {
  mirror::Simulation sim;
  mirror::FolderFaults faults;
  faults.lag_median_s = faults.lag_p90_s = 2;  // control.json reaches a new disk 2 s after it starts
  mirror::SimFolder folder(sim, 1, faults);
  folder.set_control(kHalfLr);
  FolderExchangeConfig config;
  config.run_id = "run";
  config.worker = "owner";
  std::optional<AgreedControl> before_the_file, after_the_file, repeated, long_running;
  sim.spawn("owner", [&](mirror::Clock& clock) {
    clock.sleep_s(5);  // restarted long after the file was written, on a disk that starts now
    ExchangeContext context(config, folder.disk("owner-restarted"), clock);
    ControlAgreement restarted(context);
    before_the_file = restarted.propose(40);
    clock.sleep_s(3);
    after_the_file = restarted.propose(41);
    if (after_the_file) restarted.learn(view_with(*after_the_file));  // as its agreement for round 41 is applied
    repeated = restarted.propose(42);
  });
  sim.spawn("other", [&](mirror::Clock& clock) {
    clock.sleep_s(10);
    ExchangeContext context(config, folder.disk("other"), clock);
    ControlAgreement learned(context);
    ASSERT_TRUE(learned.learn(view_with({3, 30, kHalfLr})));
    long_running = learned.propose(43);
  });
  sim.run_until(20);
  EXPECT_FALSE(before_the_file) << before_the_file->json;
  ASSERT_TRUE(after_the_file);
  EXPECT_EQ(after_the_file->json, kHalfLr);
  EXPECT_EQ(after_the_file->from_round, 43u);
  ASSERT_TRUE(repeated);
  EXPECT_EQ(repeated->json, kHalfLr);
  EXPECT_EQ(repeated->from_round, 43u);
  // A replica that learned the control from an agreement repeats it, version and round.
  ASSERT_TRUE(long_running);
  EXPECT_EQ(long_running->json, kHalfLr);
  EXPECT_EQ(long_running->version, 3u);
  EXPECT_EQ(long_running->from_round, 30u);
  sim.kill_all();
}

// An agreement that says nothing about the control changes nothing for its readers.
TEST(ControlAgreement, AnAgreementWithoutAControlIsNotAChange) {
  mirror::Simulation sim;
  mirror::SimFolder folder(sim, 1);
  std::optional<AgreedControl> learned_nothing;
  std::optional<AgreedControl> kept;
  sim.spawn("owner", [&](mirror::Clock& clock) {
    FolderExchangeConfig config;
    config.run_id = "run";
    config.worker = "owner";
    ExchangeContext context(config, folder.disk("owner"), clock);
    ControlAgreement agreement(context);
    agreement.learn(view_with({2, 12, kHalfLr}));
    wire::RoundView silent;
    silent.add_members("owner");
    learned_nothing = agreement.learn(silent);
    kept = agreement.propose(20);
  });
  sim.run_until(5);
  EXPECT_FALSE(learned_nothing);
  ASSERT_TRUE(kept);
  EXPECT_EQ(kept->json, kHalfLr);
  EXPECT_EQ(kept->version, 2u);
  sim.kill_all();
}

}  // namespace
}  // namespace gradbox::exchange
