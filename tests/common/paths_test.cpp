#include "common/paths.h"

#include <gtest/gtest.h>

namespace gradbox {
namespace {

namespace fs = std::filesystem;

TEST(IsWithin, ComparesWholeFolderNamesAfterResolvingLinksAndDots) {
  const fs::path root = fs::path(testing::TempDir()) / "gradbox-is-within";
  fs::remove_all(root);
  fs::create_directories(root / "shared" / "rounds");
  fs::create_directories(root / "sharedx");
  fs::create_directory_symlink(root / "shared" / "rounds", root / "link");
  EXPECT_TRUE(is_within(root / "shared", root / "shared"));
  EXPECT_TRUE(is_within(root / "shared" / "rounds" / "not-yet-there.gbx", root / "shared"));
  EXPECT_TRUE(is_within(root / "shared" / "rounds", root / "shared/"));
  EXPECT_FALSE(is_within(root / "sharedx" / "secret", root / "shared"));  // a longer name, not a child
  EXPECT_FALSE(is_within(root / "shared" / ".." / "secret", root / "shared"));
  EXPECT_TRUE(is_within(root / "link" / "secret", root / "shared"));  // through a link into it
  EXPECT_FALSE(is_within(root / "shared", root / "shared" / "rounds"));
  EXPECT_FALSE(is_within(root / "anything", ""));
  fs::remove_all(root);
}

}  // namespace
}  // namespace gradbox
