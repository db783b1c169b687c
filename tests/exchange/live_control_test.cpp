// The live control file's format: control.json, edited by hand while a run goes on.
#include <gtest/gtest.h>

#include "common/error.h"
#include "exchange/live_control.h"

namespace gradbox::exchange {
namespace {

TEST(LiveControl, RoundTripsEveryKeyAndKeepsAbsentKeysUnset) {
  LiveControl full;
  full.micro_batch = 8;
  full.grad_accum = 2;
  full.lr_multiplier = 0.5;
  full.weight_decay = 0.1;
  full.dropout = 0.0;
  EXPECT_FALSE(full.empty());
  EXPECT_EQ(LiveControl::from_json(full.to_json(), "t"), full);
  EXPECT_EQ(LiveControl::parse(full.to_json().dump(), "t"), full);

  LiveControl some = LiveControl::parse(R"({"lr_multiplier": 2})", "t");
  EXPECT_EQ(some.lr_multiplier, 2.0);  // an integer is a fine number
  EXPECT_FALSE(some.micro_batch || some.grad_accum || some.weight_decay || some.dropout);
  EXPECT_EQ(some.to_json().dump(), R"({"lr_multiplier":2.0})");

  LiveControl none = LiveControl::parse("{}", "t");
  EXPECT_TRUE(none.empty());
  EXPECT_EQ(none.to_json().dump(), "{}");
}

TEST(LiveControl, ToJsonIsCanonicalWhateverTheKeyOrder) {
  auto a = LiveControl::parse(R"({"dropout": 0.1, "micro_batch": 4, "lr_multiplier": 0.25})", "a");
  auto b = LiveControl::parse(R"({"lr_multiplier": 0.25, "dropout": 0.1, "micro_batch": 4})", "b");
  EXPECT_EQ(a, b);
  EXPECT_EQ(a.to_json().dump(), b.to_json().dump());
  EXPECT_EQ(a.to_json().dump(), R"({"dropout":0.1,"lr_multiplier":0.25,"micro_batch":4})");
}

TEST(LiveControl, InvalidInputNamesTheOriginAndTheKey) {
  struct Case {
    std::string text, key;
  };
  const std::vector<Case> cases = {
      {R"({"micro_batch": 8, "learning_rate": 1})", "learning_rate"},  // unknown key
      {R"({"micro_batch": "8"})", "micro_batch"},                      // wrong type
      {R"({"micro_batch": 8.5})", "micro_batch"},
      {R"({"micro_batch": true})", "micro_batch"},
      {R"({"micro_batch": 0})", "micro_batch"},                        // out of range
      {R"({"micro_batch": 65537})", "micro_batch"},
      {R"({"micro_batch": 18446744073709551615})", "micro_batch"},     // would wrap to -1
      {R"({"grad_accum": 0})", "grad_accum"},
      {R"({"grad_accum": -3})", "grad_accum"},
      {R"({"grad_accum": null})", "grad_accum"},
      {R"({"lr_multiplier": 0})", "lr_multiplier"},
      {R"({"lr_multiplier": 100.5})", "lr_multiplier"},
      {R"({"lr_multiplier": "half"})", "lr_multiplier"},
      {R"({"weight_decay": -0.1})", "weight_decay"},
      {R"({"weight_decay": 11})", "weight_decay"},
      {R"({"dropout": 1})", "dropout"},
      {R"({"dropout": -0.01})", "dropout"},
      {R"({"dropout": [0.1]})", "dropout"},
  };
  for (const auto& c : cases) {
    try {
      LiveControl::parse(c.text, "shared/control.json");
      ADD_FAILURE() << "accepted " << c.text;
    } catch (const InputError& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find("shared/control.json"), std::string::npos) << msg;
      EXPECT_NE(msg.find(c.key), std::string::npos) << msg;
    }
  }
  // The bounds themselves are allowed where the interval is closed.
  auto edges = LiveControl::parse(
      R"({"micro_batch": 65536, "grad_accum": 1, "lr_multiplier": 100, "weight_decay": 10, "dropout": 0})", "t");
  EXPECT_EQ(edges.micro_batch, 65536);
  EXPECT_EQ(edges.lr_multiplier, 100.0);
}

TEST(LiveControl, NotJsonOrNotAnObjectNamesTheOrigin) {
  for (const std::string text : {R"({"micro_batch": 8,)", "", "[1, 2]", "8"}) {
    try {
      LiveControl::parse(text, "inbox/control.json");
      ADD_FAILURE() << "accepted '" << text << "'";
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find("inbox/control.json"), std::string::npos) << e.what();
    }
  }
}

TEST(LiveControl, DescribeAndDescribeChange) {
  LiveControl before, after;
  EXPECT_EQ(before.describe(), "nothing set");
  EXPECT_EQ(describe_change(before, after), "no change");
  before.micro_batch = 8;
  before.lr_multiplier = 1.0;
  EXPECT_EQ(before.describe(), "micro_batch 8, lr_multiplier 1");
  after = before;
  after.lr_multiplier = 0.5;
  after.dropout = 0.1;
  EXPECT_EQ(describe_change(before, after), "lr_multiplier 1 -> 0.5, dropout (flag) -> 0.1");
  after.micro_batch.reset();
  EXPECT_EQ(describe_change(before, after), "micro_batch 8 -> (flag), lr_multiplier 1 -> 0.5, dropout (flag) -> 0.1");
  EXPECT_EQ(describe_change(after, after), "no change");
}

}  // namespace
}  // namespace gradbox::exchange
