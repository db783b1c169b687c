#include <gtest/gtest.h>

#include "common/error.h"
#include "worker/lr_schedule.h"
#include "worker/train_config.h"

namespace gradbox::worker {
namespace {

TEST(LrSchedule, WarmupCosineFloor) {
  LrSchedule s{1.0, 0.1, 10, 110};
  EXPECT_DOUBLE_EQ(s.at(0), 0.1);
  EXPECT_DOUBLE_EQ(s.at(9), 1.0);
  EXPECT_DOUBLE_EQ(s.at(10), 1.0);
  EXPECT_NEAR(s.at(60), 0.55, 1e-12);  // halfway down the cosine
  EXPECT_DOUBLE_EQ(s.at(110), 0.1);
  EXPECT_DOUBLE_EQ(s.at(500), 0.1);
  for (int64_t i = 10; i < 110; ++i) EXPECT_GE(s.at(i), s.at(i + 1));
}

TEST(TrainConfig, JsonRoundTrip) {
  TrainConfig c;
  c.data_dir = "d";
  c.lr = 1e-3;
  c.optimizer = OptimizerKind::lamb;
  c.precision = Precision::bf16;
  c.sync = SyncMode::diloco;
  c.inner_steps = 17;
  c.sync_warmup_steps = 3;
  TrainConfig back = TrainConfig::from_json(c.to_json(), "test");
  EXPECT_EQ(back.to_json(), c.to_json());
  EXPECT_EQ(back.sync, SyncMode::diloco);
  EXPECT_EQ(back.inner_steps, 17);
}

TEST(TrainConfig, UnknownKeyAndWrongTypeNameTheKey) {
  try {
    TrainConfig::from_json({{"learning_rate", 1}}, "cfg.json");
    FAIL();
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("cfg.json: unknown key 'learning_rate'"), std::string::npos) << e.what();
  }
  try {
    TrainConfig::from_json({{"lr", "fast"}}, "cfg.json");
    FAIL();
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("'lr'"), std::string::npos) << e.what();
  }
}

TEST(TrainConfig, ValidationNamesTheFlag) {
  TrainConfig c;
  c.data_dir = "d";
  c.micro_batch = 0;
  try {
    c.validate();
    FAIL();
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("--micro-batch"), std::string::npos);
  }
  EXPECT_THROW(parse_optimizer("adagrad"), InputError);
  EXPECT_EQ(parse_optimizer("sgd"), OptimizerKind::sgd);
  EXPECT_THROW(parse_sync("local-sgd"), InputError);
  c.micro_batch = 1;
  c.sync = SyncMode::diloco;
  c.inner_steps = 0;
  try {
    c.validate();
    FAIL();
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("--inner-steps"), std::string::npos);
  }
  EXPECT_THROW(parse_precision("fp8"), InputError);
}

// --moments: parsed, refused for another optimizer, kept in the json, and part of the settings
// per-step workers check (they step one gradient, so their moments must be alike), not DiLoCo's.
TEST(TrainConfig, MomentsAreCheckedWhereReplicasShareThem) {
  EXPECT_EQ(parse_moments("int8"), MomentStorage::int8);
  EXPECT_THROW(parse_moments("int4"), InputError);
  TrainConfig c;
  c.data_dir = "d";
  c.moments = MomentStorage::int8;
  c.validate();
  EXPECT_EQ(TrainConfig::from_json(c.to_json(), "test").moments, MomentStorage::int8);
  TrainConfig fp32 = c;
  fp32.moments = MomentStorage::fp32;
  EXPECT_NE(describe_sync(c), describe_sync(fp32));
  EXPECT_EQ(describe_sync(fp32), "gradient");
  c.sync = fp32.sync = SyncMode::diloco;
  EXPECT_EQ(describe_sync(c), describe_sync(fp32));
  c.optimizer = OptimizerKind::lamb;
  try {
    c.validate();
    FAIL();
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("--moments int8"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace gradbox::worker
