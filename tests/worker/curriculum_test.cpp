// Note [Curriculum]: stages parsed, looked up by step, and bad ones named.
#include <gtest/gtest.h>

#include "common/error.h"
#include "worker/curriculum.h"

namespace gradbox::worker {
namespace {

TEST(Curriculum, StagesHoldFromTheirStepOn) {
  const Curriculum c = Curriculum::parse("5:64:2,100:128,1000:256:8", 256);
  ASSERT_EQ(c.stages().size(), 3u);
  EXPECT_FALSE(c.at(4).has_value());  // before the first stage: the flags
  EXPECT_EQ(c.at(5), (CurriculumStage{5, 64, 2}));
  EXPECT_EQ(c.at(99), (CurriculumStage{5, 64, 2}));
  EXPECT_EQ(c.at(100), (CurriculumStage{100, 128, std::nullopt}));  // the flag's accumulation
  EXPECT_EQ(c.at(5000), (CurriculumStage{1000, 256, 8}));
  EXPECT_TRUE(Curriculum::parse("", 256).empty());
}

TEST(Curriculum, BadStagesAreNamed) {
  for (const char* bad : {"5", "5:64:2:1", "x:64", "5:6four", "0:64", "5:64,5:128", "9:64,5:128", "5:0", "5:512",
                          "5:64:0", "5:64,"}) {
    try {
      Curriculum::parse(bad, 256);
      ADD_FAILURE() << bad;
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find("--curriculum"), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace gradbox::worker
