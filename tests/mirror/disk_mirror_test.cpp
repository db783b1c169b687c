// DiskMirror's recycled files (Note [Recycled files] in mirror/disk_mirror.cpp): which withdrawn
// files are kept to be written over, that a publish writes over one only when nothing else
// shares it, and that the bytes published are exactly the new ones.
#include "mirror/disk_mirror.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/atomic_file.h"
#include "common/error.h"  // str
#include "mirror/sync_contract.h"

namespace gradbox::mirror {
namespace {

namespace fs = std::filesystem;

constexpr uint64_t kLarge = DiskMirror::kRecycleMinBytes + 4096;

fs::path fresh_dir(const std::string& name) {
  fs::path dir = fs::temp_directory_path() / str("gradbox_disk_mirror_", name, "_", ::getpid());
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

std::string bytes_of(uint64_t size, char c) { return std::string(static_cast<size_t>(size), c); }

ino_t inode(const fs::path& path) {
  struct ::stat st {};
  EXPECT_EQ(::stat(path.c_str(), &st), 0) << path;
  return st.st_ino;
}

size_t files_in(const fs::path& dir) {
  std::error_code ec;
  return static_cast<size_t>(std::distance(fs::directory_iterator(dir, ec), fs::directory_iterator()));
}

// What the syncer writes once a file is in the shared folder.
void land(const fs::path& local, const std::string& rel) {
  write_file_atomic(local / kOutboxDir / (rel + std::string(kSentSuffix)), "");
}

TEST(DiskMirror, AWithdrawnFileThatLandedIsWrittenOverByTheNextLargePublish) {
  const fs::path local = fresh_dir("recycle");
  DiskMirror mirror(local);
  const std::string first = "rounds/r00000001/g-a-s0-1.gbx";
  mirror.publish(first, bytes_of(kLarge, 'a'));
  land(local, first);
  const ino_t kept = inode(local / kOutboxDir / first);
  mirror.withdraw("rounds/r00000001");  // a round's folder, as round gc withdraws it
  EXPECT_FALSE(mirror.published(first));
  EXPECT_TRUE(fs::exists(local / kOutboxDir / (first + std::string(kSentSuffix))));  // the syncer deletes by it
  EXPECT_EQ(mirror.recycled_files(), 1u);

  // Smaller than the kept file: written over, cut to the new size, the same inode.
  const std::string second = "rounds/r00000003/g-a-s0-2.gbx";
  const std::string bytes = bytes_of(kLarge - 1000, 'b') + "end";
  mirror.publish(second, bytes);
  EXPECT_EQ(inode(local / kOutboxDir / second), kept);
  EXPECT_EQ(mirror.read_published(second), bytes);
  EXPECT_EQ(mirror.publishes_recycled(), 1u);
  EXPECT_EQ(mirror.recycled_files(), 0u);

  // Nothing kept now: a new file, and as pieces the same bytes as whole.
  const std::string third = "rounds/r00000004/g-a-s0-3.gbx";
  const std::string head = "head", payload = bytes_of(kLarge, 'c'), trailer = "trailer";
  const std::string_view pieces[] = {head, payload, "", trailer};
  mirror.publish_pieces(third, pieces);
  EXPECT_NE(inode(local / kOutboxDir / third), kept);
  EXPECT_EQ(mirror.read_published(third), head + payload + trailer);
  EXPECT_EQ(mirror.publishes_recycled(), 1u);

  // Larger than the kept file: written over and grown.
  land(local, third);
  const ino_t third_inode = inode(local / kOutboxDir / third);
  mirror.withdraw(third);
  const std::string fourth = "rounds/r00000005/g-a-s0-4.gbx";
  mirror.publish(fourth, bytes_of(3 * kLarge, 'd'));
  EXPECT_EQ(inode(local / kOutboxDir / fourth), third_inode);
  EXPECT_EQ(mirror.read_published(fourth), bytes_of(3 * kLarge, 'd'));
  EXPECT_EQ(mirror.publishes_recycled(), 2u);
  EXPECT_EQ(files_in(local / kRecycledDir), 0u);
}

TEST(DiskMirror, OnlyLargeLandedFilesThatNoOtherNameSharesAreWrittenOver) {
  const fs::path local = fresh_dir("rules");
  const fs::path shared = fresh_dir("rules_shared");
  DiskMirror mirror(local);
  const auto publish_landed = [&](const std::string& rel, uint64_t size) {
    mirror.publish(rel, bytes_of(size, 'x'));
    land(local, rel);
  };
  // Deleted, not kept: a small file, one that never landed (the syncer may be copying it), a
  // checkpoint's part.
  publish_landed("rounds/r00000001/small.gbx", DiskMirror::kRecycleMinBytes - 1);
  mirror.publish("rounds/r00000001/unlanded.gbx", bytes_of(kLarge, 'u'));
  publish_landed("checkpoints/c00000001/part-0000.gbx", kLarge);
  mirror.withdraw("rounds/r00000001");
  mirror.withdraw("checkpoints/c00000001");
  EXPECT_EQ(mirror.recycled_files(), 0u);
  EXPECT_EQ(files_in(local / kRecycledDir), 0u);

  // Hard-linked into the shared folder (Note [Hard-linked transfers]): kept, but not written
  // over while the shared copy is that inode; the shared copy keeps its bytes.
  const std::string linked = "rounds/r00000002/g-a-s0-5.gbx";
  publish_landed(linked, kLarge);
  fs::create_hard_link(local / kOutboxDir / linked, shared / "g-a-s0-5.gbx");
  mirror.withdraw(linked);
  EXPECT_EQ(mirror.recycled_files(), 1u);
  const std::string next = "rounds/r00000004/g-a-s0-6.gbx";
  mirror.publish(next, bytes_of(kLarge, 'n'));
  EXPECT_EQ(mirror.publishes_recycled(), 0u);
  EXPECT_NE(inode(local / kOutboxDir / next), inode(shared / "g-a-s0-5.gbx"));
  EXPECT_EQ(read_file(shared / "g-a-s0-5.gbx"), bytes_of(kLarge, 'x'));

  // The shared copy deleted (the syncer, once the withdrawal is seen): now it is.
  const ino_t kept = inode(shared / "g-a-s0-5.gbx");
  fs::remove(shared / "g-a-s0-5.gbx");
  const std::string later = "rounds/r00000005/g-a-s0-7.gbx";
  mirror.publish(later, bytes_of(kLarge, 'l'));
  EXPECT_EQ(mirror.publishes_recycled(), 1u);
  EXPECT_EQ(inode(local / kOutboxDir / later), kept);
  EXPECT_EQ(mirror.read_published(later), bytes_of(kLarge, 'l'));
}

TEST(DiskMirror, KeepsAtMostItsLimitAndLeavesNothingBehind) {
  const fs::path local = fresh_dir("limit");
  fs::create_directories(local / kRecycledDir);
  write_file_atomic(local / kRecycledDir / "1.7", "an earlier life's");  // another process id
  {
    DiskMirror mirror(local);
    EXPECT_FALSE(fs::exists(local / kRecycledDir / "1.7"));
    for (size_t i = 0; i < DiskMirror::kMaxRecycled + 3; ++i) {
      const std::string rel = str("rounds/r00000001/g-", i, ".gbx");
      mirror.publish(rel, bytes_of(DiskMirror::kRecycleMinBytes, 'k'));
      land(local, rel);
    }
    mirror.withdraw("rounds/r00000001");
    EXPECT_EQ(mirror.recycled_files(), DiskMirror::kMaxRecycled);
    EXPECT_EQ(files_in(local / kRecycledDir), DiskMirror::kMaxRecycled);
  }
  EXPECT_EQ(files_in(local / kRecycledDir), 0u);  // deleted with the mirror
}

}  // namespace
}  // namespace gradbox::mirror
