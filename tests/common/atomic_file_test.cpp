#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <vector>

#include "common/atomic_file.h"
#include "common/checksum.h"
#include "common/error.h"

namespace gradbox {
namespace {

fs::path fresh_dir(const std::string& name) {
  fs::path dir = fs::temp_directory_path() / str("gradbox_", name, "_", ::getpid());
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

TEST(AtomicFile, CommitPublishesWholeFile) {
  fs::path dir = fresh_dir("commit");
  write_file_atomic(dir / "a.bin", "hello");
  EXPECT_EQ(read_file(dir / "a.bin"), "hello");
  // Overwriting goes through a new temp file: old content is replaced whole.
  write_file_atomic(dir / "a.bin", "world!");
  EXPECT_EQ(read_file(dir / "a.bin"), "world!");
  EXPECT_EQ(std::distance(fs::directory_iterator(dir), fs::directory_iterator()), 1);
}

TEST(AtomicFile, AbandonedWriterLeavesNothing) {
  fs::path dir = fresh_dir("abandon");
  {
    AtomicFileWriter writer(dir / "b.bin");
    writer.write("partial");
  }  // no commit: as if the process failed mid-write
  EXPECT_FALSE(fs::exists(dir / "b.bin"));
  EXPECT_EQ(std::distance(fs::directory_iterator(dir), fs::directory_iterator()), 0);
}

TEST(AtomicFile, MissingFileErrorNamesIt) {
  try {
    read_file("/nonexistent/gradbox/file.txt");
    FAIL() << "expected InputError";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/gradbox/file.txt"), std::string::npos);
  }
}

// Sizes around the reader's one-byte look-past, an empty file, binary bytes, and a folder.
TEST(AtomicFile, ReadFileReturnsEveryByteAndRefusesAFolder) {
  fs::path dir = fresh_dir("read");
  for (const size_t size : {size_t{0}, size_t{1}, size_t{4095}, size_t{4096}, size_t{(5 << 20) + 3}}) {
    std::string bytes(size, '\0');
    for (size_t i = 0; i < size; ++i) bytes[i] = static_cast<char>((i * 131 + size) & 0xff);
    write_file_atomic(dir / "r.bin", bytes);
    EXPECT_EQ(read_file(dir / "r.bin"), bytes) << size << " bytes";
  }
  try {
    read_file(dir);
    FAIL() << "expected InputError";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("is a directory"), std::string::npos) << e.what();
  }
}

ino_t inode(const fs::path& path) {
  struct ::stat st {};
  EXPECT_EQ(::stat(path.c_str(), &st), 0) << path;
  return st.st_ino;
}

TEST(AtomicFile, PiecesAreWrittenInOrderHoweverMany) {
  const fs::path dir = fresh_dir("pieces");
  // More pieces than one writev(2) takes (IOV_MAX, 1024 on Linux), empty ones among them.
  std::vector<std::string> held;
  std::string whole;
  for (int i = 0; i < 3000; ++i) {
    held.push_back(i % 7 == 0 ? std::string() : str("piece ", i, ";"));
    whole += held.back();
  }
  const std::vector<std::string_view> pieces(held.begin(), held.end());
  AtomicFileWriter writer(dir / "p.bin");
  writer.write(pieces);
  EXPECT_EQ(writer.bytes_written(), whole.size());
  writer.commit();
  EXPECT_EQ(read_file(dir / "p.bin"), whole);
}

TEST(AtomicFile, AReusedFileIsWrittenOverAndCutToWhatWasWritten) {
  const fs::path dir = fresh_dir("reuse");
  write_file_atomic(dir / "old.bin", std::string(100000, 'o'));
  const ino_t old_inode = inode(dir / "old.bin");
  {
    AtomicFileWriter writer(dir / "shorter.bin", dir / "old.bin");
    EXPECT_TRUE(writer.reused());
    EXPECT_FALSE(fs::exists(dir / "old.bin"));  // taken: under the temp name now
    writer.write(std::string(1000, 'n'));
    EXPECT_FALSE(fs::exists(dir / "shorter.bin"));  // nothing under the final name before commit
    writer.commit();
  }
  EXPECT_EQ(read_file(dir / "shorter.bin"), std::string(1000, 'n'));
  EXPECT_EQ(inode(dir / "shorter.bin"), old_inode);
  {
    AtomicFileWriter writer(dir / "longer.bin", dir / "shorter.bin");
    writer.write(std::string(300000, 'g'));
    writer.commit(AtomicFileWriter::Durability::not_durable);
  }
  EXPECT_EQ(read_file(dir / "longer.bin"), std::string(300000, 'g'));
  EXPECT_EQ(inode(dir / "longer.bin"), old_inode);
  // Nothing to reuse: a new file.
  AtomicFileWriter fresh(dir / "fresh.bin", dir / "gone.bin");
  EXPECT_FALSE(fresh.reused());
  fresh.write("new");
  fresh.commit();
  EXPECT_EQ(read_file(dir / "fresh.bin"), "new");
  EXPECT_EQ(std::distance(fs::directory_iterator(dir), fs::directory_iterator()), 2);  // no temp left
}

TEST(Checksum, FileMatchesBufferAndDetectsOneByte) {
  fs::path dir = fresh_dir("checksum");
  std::string bytes(3 << 20, 'x');  // spans several read chunks
  write_file_atomic(dir / "c.bin", bytes);
  EXPECT_EQ(file_checksum64(dir / "c.bin"), checksum64(bytes.data(), bytes.size()));
  bytes[12345] ^= 1;
  EXPECT_NE(file_checksum64(dir / "c.bin"), checksum64(bytes.data(), bytes.size()));
  EXPECT_EQ(to_hex64(0xabcULL), "0000000000000abc");
}

}  // namespace
}  // namespace gradbox
