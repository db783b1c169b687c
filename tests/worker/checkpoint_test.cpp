// Checkpoints are whole or ignored: a truncated file, a flipped byte, a missing manifest or a
// half-written folder is detected, named, and never loaded.
#include <gtest/gtest.h>
#include <torch/torch.h>
#include <unistd.h>

#include <fstream>

#include "common/error.h"
#include "worker/checkpoint.h"

namespace gradbox::worker {
namespace {

struct Net : torch::nn::Module {
  Net() { fc = register_module("fc", torch::nn::Linear(6, 5)); }
  torch::nn::Linear fc{nullptr};
};

class CheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    run_ = fs::temp_directory_path() / str("gradbox_ckpt_", ::getpid(), "_",
                                           ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(run_);
    flat_ = std::make_unique<FlatParameters>(net_, [](const std::string& n) { return n.ends_with("bias"); });
  }
  void TearDown() override { fs::remove_all(run_); }

  fs::path save(int64_t step) {
    CheckpointState state;
    state.step = step;
    state.tokens = step * 100;
    state.optimizer_step = step;
    state.loss_scale = 4096.0 * static_cast<double>(step);
    state.loss_scale_good_steps = 7 * step;
    state.model_config = {{"arch", "test"}};
    state.train_config = nlohmann::json::object();
    torch::Tensor m = torch::full_like(flat_->params(), static_cast<float>(step));
    return save_checkpoint(run_, state, *flat_, {{"exp_avg", m}, {"exp_avg_sq", m * 2}});
  }

  fs::path run_;
  Net net_;
  std::unique_ptr<FlatParameters> flat_;
};

std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

TEST_F(CheckpointTest, RoundTripRestoresEverything) {
  torch::manual_seed(3);
  const torch::Tensor expected_params = flat_->params().clone();
  const torch::Tensor rng_before = at::detail::getDefaultCPUGenerator().get_state();
  const fs::path dir = save(4);
  EXPECT_EQ(dir.filename(), "step_00000004");
  const torch::Tensor draw_after_save = torch::rand({3});

  flat_->params().zero_();
  CheckpointData data = load_checkpoint(run_);
  EXPECT_EQ(data.state.step, 4);
  EXPECT_EQ(data.state.tokens, 400);
  EXPECT_EQ(data.state.loss_scale, 16384.0) << "fp16's loss scale is replica state";
  EXPECT_EQ(data.state.loss_scale_good_steps, 28);
  restore_parameters(data, *flat_, dir);
  restore_rng(data);
  EXPECT_TRUE(torch::equal(flat_->params(), expected_params));
  EXPECT_TRUE(torch::equal(data.moments.at("exp_avg_sq"), torch::full_like(expected_params, 8.f)));
  EXPECT_TRUE(torch::equal(torch::rand({3}), draw_after_save));  // RNG continues where it was
  (void)rng_before;
}

// DiLoCo's outer state round-trips, the eager rule's share of the others included (Note [Eager
// outer steps]); without the rule the checkpoint has none.
TEST_F(CheckpointTest, TheOuterStateAndTheEagerRulesViewRoundTrip) {
  CheckpointState state;
  state.step = 3;
  state.model_config = {{"arch", "test"}};
  state.train_config = nlohmann::json::object();
  const torch::Tensor m = torch::zeros_like(flat_->params());
  OuterState outer;
  outer.global = flat_->params().clone() + 1;
  outer.momentum = flat_->params().clone() * 2;
  outer.round_tokens = {5, 7};
  outer.round_loss_sum = {1.5, 2.5};
  outer.eager_offset = torch::arange(flat_->numel(), torch::kFloat32);
  outer.eager_momentum = outer.eager_offset * 2;
  outer.eager_sent_share = outer.eager_offset * 3;
  outer.eager_tokens = {-1, 96};
  save_checkpoint(run_, state, *flat_, {{"exp_avg", m}, {"exp_avg_sq", m}}, &outer);
  CheckpointData data = load_checkpoint(run_);
  ASSERT_TRUE(data.outer.has_value());
  EXPECT_TRUE(torch::equal(data.outer->global, outer.global));
  EXPECT_TRUE(torch::equal(data.outer->momentum, outer.momentum));
  EXPECT_EQ(data.outer->round_tokens, outer.round_tokens);
  EXPECT_TRUE(torch::equal(data.outer->eager_offset, outer.eager_offset));
  EXPECT_TRUE(torch::equal(data.outer->eager_momentum, outer.eager_momentum));
  EXPECT_TRUE(torch::equal(data.outer->eager_sent_share, outer.eager_sent_share));
  EXPECT_EQ(data.outer->eager_tokens, outer.eager_tokens);

  outer.eager_offset = outer.eager_momentum = outer.eager_sent_share = torch::Tensor();
  state.step = 4;
  save_checkpoint(run_, state, *flat_, {{"exp_avg", m}, {"exp_avg_sq", m}}, &outer);
  data = load_checkpoint(run_);
  ASSERT_TRUE(data.outer.has_value());
  EXPECT_FALSE(data.outer->eager_offset.defined());
  EXPECT_TRUE(data.outer->eager_tokens.empty());
}

// θ_g equal to the parameters (a round's end, one fragment, the delayed rule) is saved once:
// the checkpoint a joiner downloads is 4 bytes a parameter smaller, and loads θ_g back as the
// parameters. One that differs by a single value is saved whole.
TEST_F(CheckpointTest, TheGlobalParametersAreSavedOnceWhenTheyAreTheParameters) {
  CheckpointState state;
  state.step = 5;
  state.model_config = {{"arch", "test"}};
  state.train_config = nlohmann::json::object();
  const torch::Tensor m = torch::zeros_like(flat_->params());
  OuterState outer;
  outer.global = flat_->params().clone();
  outer.momentum = flat_->params().clone() * 2;
  const fs::path once = save_checkpoint(run_, state, *flat_, {{"exp_avg", m}, {"exp_avg_sq", m}}, &outer);
  CheckpointData data = load_checkpoint(run_);
  ASSERT_TRUE(data.outer.has_value());
  EXPECT_FALSE(data.outer->global.defined());
  EXPECT_TRUE(torch::equal(data.outer->momentum, outer.momentum));
  const uint64_t once_bytes = fs::file_size(once / "optimizer.safetensors");

  outer.global[0] += 1;
  state.step = 6;
  const fs::path twice = save_checkpoint(run_, state, *flat_, {{"exp_avg", m}, {"exp_avg_sq", m}}, &outer);
  data = load_checkpoint(run_);
  ASSERT_TRUE(data.outer->global.defined());
  EXPECT_TRUE(torch::equal(data.outer->global, outer.global));
  // The second holds θ_g's values more (and its header entry).
  const uint64_t values = static_cast<uint64_t>(flat_->numel()) * sizeof(float);
  const uint64_t more = fs::file_size(twice / "optimizer.safetensors") - once_bytes;
  EXPECT_GE(more, values);
  EXPECT_LT(more, values + 256);
}

TEST_F(CheckpointTest, FlippedByteIsNamedAndSkipped) {
  save(1);
  const fs::path newest = save(2);
  {
    std::fstream f(newest / "model.safetensors", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(-3, std::ios::end);
    char c;
    f.read(&c, 1);
    f.seekp(-3, std::ios::end);
    c ^= 0x40;
    f.write(&c, 1);
  }
  const std::string error = error_of([&] { verify_checkpoint(newest); });
  EXPECT_NE(error.find("model.safetensors"), std::string::npos) << error;
  EXPECT_NE(error.find("checksum"), std::string::npos) << error;
  EXPECT_EQ(find_latest_checkpoint(run_)->filename(), "step_00000001");
}

TEST_F(CheckpointTest, TruncatedFileIsNamed) {
  const fs::path dir = save(3);
  fs::resize_file(dir / "optimizer.safetensors", fs::file_size(dir / "optimizer.safetensors") / 2);
  const std::string error = error_of([&] { load_checkpoint(dir); });
  EXPECT_NE(error.find("optimizer.safetensors"), std::string::npos) << error;
  EXPECT_NE(error.find("truncated"), std::string::npos) << error;
}

TEST_F(CheckpointTest, UnfinishedFoldersAreIgnoredAndPruned) {
  save(5);
  // A writer killed mid-checkpoint leaves a temp folder, and one killed before its manifest a
  // folder without one: neither is ever loaded.
  const fs::path partial = checkpoint_root(run_) / "step_00000009.tmp.12345";
  fs::create_directories(partial);
  std::ofstream(partial / "model.safetensors") << "half";
  const fs::path no_manifest = checkpoint_root(run_) / "step_00000007";
  fs::create_directories(no_manifest);
  std::ofstream(no_manifest / "state.json") << "{}";
  EXPECT_EQ(find_latest_checkpoint(run_)->filename(), "step_00000005");
  EXPECT_NE(error_of([&] { verify_checkpoint(no_manifest); }).find("manifest.json"), std::string::npos);

  save(6);
  prune_checkpoints(run_, 1);
  EXPECT_FALSE(fs::exists(partial));
  EXPECT_FALSE(fs::exists(no_manifest));  // garbage, not a checkpoint that counts as kept
  EXPECT_FALSE(fs::exists(checkpoint_root(run_) / "step_00000005"));
  EXPECT_EQ(find_latest_checkpoint(run_)->filename(), "step_00000006");
}

TEST_F(CheckpointTest, MismatchedModelIsRefused) {
  const fs::path dir = save(1);
  CheckpointData data = load_checkpoint(dir);
  data.parameters.erase("fc.bias");
  data.parameters["fc.other"] = torch::zeros({5});
  const std::string error = error_of([&] { restore_parameters(data, *flat_, dir); });
  EXPECT_NE(error.find("fc.bias"), std::string::npos) << error;
}

TEST_F(CheckpointTest, NothingToResumeFrom) {
  EXPECT_FALSE(find_latest_checkpoint(run_).has_value());
  EXPECT_NE(error_of([&] { load_checkpoint(run_ / "nope"); }).find("nope"), std::string::npos);
}

}  // namespace
}  // namespace gradbox::worker
