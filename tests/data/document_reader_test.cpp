#include "data/document_reader.h"

#include <gtest/gtest.h>

#include "common/error.h"
#include "data/input_files.h"
#include "test_util.h"

namespace gradbox::data {
namespace {

namespace fs = std::filesystem;

using testing::ScratchDir;
using testing::write_text;

std::vector<Document> read_all(const fs::path& path, DocumentFormat format,
                               int64_t max_doc_bytes = 1 << 20) {
  DocumentReader reader(path, format, max_doc_bytes);
  std::vector<Document> docs;
  Document doc;
  while (reader.next(doc)) docs.push_back(doc);
  return docs;
}

std::vector<std::string> texts(const std::vector<Document>& docs) {
  std::vector<std::string> out;
  for (const auto& d : docs) out.push_back(d.text);
  return out;
}

TEST(DocumentReader, Lines) {
  ScratchDir dir;
  write_text(dir / "a.txt", "first doc\r\n\n   \nsecond doc\nthird, no newline");
  const auto docs = read_all(dir / "a.txt", DocumentFormat::lines);
  EXPECT_EQ(texts(docs), (std::vector<std::string>{"first doc", "second doc", "third, no newline"}));
  EXPECT_EQ(docs[0].bytes, 11);  // "first doc\r\n"
  EXPECT_EQ(docs[0].status, DocumentStatus::ok);
}

TEST(DocumentReader, Paragraphs) {
  ScratchDir dir;
  write_text(dir / "p.txt", "\n\nline one\nline two\n\n \t\npara two\r\n\n\n\npara three\n");
  EXPECT_EQ(texts(read_all(dir / "p.txt", DocumentFormat::paragraphs)),
            (std::vector<std::string>{"line one\nline two", "para two", "para three"}));
}

TEST(DocumentReader, FortunesSeparatedByPercentLines) {
  ScratchDir dir;
  write_text(dir / "f",
             "\tA fortune\n\twith two lines.\n%\nAnother one\n\n-- with a blank line inside\n%\n"
             "%\n100% sure\n%\n");
  EXPECT_EQ(texts(read_all(dir / "f", DocumentFormat::fortune)),
            (std::vector<std::string>{"\tA fortune\n\twith two lines.",
                                      "Another one\n\n-- with a blank line inside",
                                      "100% sure"}));
}

TEST(DocumentReader, JsonLines) {
  ScratchDir dir;
  write_text(dir / "d.jsonl",
             "{\"text\": \"hello\\nworld\", \"id\": 1}\n\n{\"id\": 2}\nnot json\n{\"text\": 5}\n"
             "{\"text\": \"\\u0416\"}\n");
  const auto docs = read_all(dir / "d.jsonl", DocumentFormat::jsonl);
  ASSERT_EQ(docs.size(), 5u);
  EXPECT_EQ(docs[0].text, "hello\nworld");
  EXPECT_EQ(docs[0].status, DocumentStatus::ok);
  EXPECT_EQ(docs[1].status, DocumentStatus::malformed);
  EXPECT_EQ(docs[2].status, DocumentStatus::malformed);
  EXPECT_EQ(docs[3].status, DocumentStatus::malformed);
  EXPECT_EQ(docs[4].text, "\xD0\x96");
}

TEST(DocumentReader, OverLongDocumentsAreCappedAndFlagged) {
  ScratchDir dir;
  const std::string big(300'000, 'x');  // larger than the reader's 256 KiB buffer
  write_text(dir / "l.txt", "short\n" + big + "\nafter\n");
  auto docs = read_all(dir / "l.txt", DocumentFormat::lines, 1000);
  ASSERT_EQ(docs.size(), 3u);
  EXPECT_EQ(docs[1].status, DocumentStatus::too_long);
  EXPECT_EQ(docs[1].text.size(), 1000u);
  EXPECT_EQ(docs[1].bytes, 300'001);
  EXPECT_EQ(docs[2].text, "after");

  write_text(dir / "f", "one\n%\n" + big + "\nmore\n" + big + "\n%\nthree\n");
  docs = read_all(dir / "f", DocumentFormat::fortune, 1000);
  ASSERT_EQ(docs.size(), 3u);
  EXPECT_EQ(docs[1].status, DocumentStatus::too_long);
  EXPECT_LE(docs[1].text.size(), 1000u);
  EXPECT_EQ(docs[1].bytes, 2 * 300'001 + 5);
  EXPECT_EQ(docs[2].text, "three");

  // Many short lines that only together pass the cap.
  std::string para;
  for (int i = 0; i < 100; ++i) para += "twenty bytes of text\n";
  write_text(dir / "p.txt", para + "\nnext\n");
  docs = read_all(dir / "p.txt", DocumentFormat::paragraphs, 1000);
  ASSERT_EQ(docs.size(), 2u);
  EXPECT_EQ(docs[0].status, DocumentStatus::too_long);
  EXPECT_EQ(docs[1].text, "next");

  write_text(dir / "j.jsonl", "{\"text\": \"" + big + "\"}\n{\"text\": \"ok\"}\n");
  docs = read_all(dir / "j.jsonl", DocumentFormat::jsonl, 1000);
  ASSERT_EQ(docs.size(), 2u);
  EXPECT_EQ(docs[0].status, DocumentStatus::too_long);
  EXPECT_EQ(docs[1].text, "ok");
}

TEST(DocumentReader, InvalidUtf8PassesThroughUnchanged) {
  ScratchDir dir;
  write_text(dir / "b.txt", "ok \xFF\xC3 bytes\n");
  EXPECT_EQ(texts(read_all(dir / "b.txt", DocumentFormat::lines)),
            (std::vector<std::string>{"ok \xFF\xC3 bytes"}));
}

TEST(DocumentReader, DetectsFormats) {
  EXPECT_EQ(detect_format("x.jsonl", ""), DocumentFormat::jsonl);
  EXPECT_EQ(detect_format("/usr/share/games/fortunes/art", "anything"), DocumentFormat::fortune);
  EXPECT_EQ(detect_format("x.txt", "  {\"text\": \"a\"}\n"), DocumentFormat::jsonl);
  EXPECT_EQ(detect_format("ru/2001.03", "joke\n%\nanother\n"), DocumentFormat::fortune);
  EXPECT_EQ(detect_format("x.txt", "\n\npara one\nstill\n\npara two\n"), DocumentFormat::paragraphs);
  EXPECT_EQ(detect_format("x.txt", "one\ntwo\nthree\n\n"), DocumentFormat::lines);
  EXPECT_EQ(parse_document_format("auto"), DocumentFormat::detect);
  EXPECT_THROW(parse_document_format("xml"), InputError);

  ScratchDir dir;
  write_text(dir / "fortunes" / "jokes", "a joke\n%\nanother\n");
  DocumentReader reader(dir / "fortunes" / "jokes", DocumentFormat::detect, 1000);
  EXPECT_EQ(reader.format(), DocumentFormat::fortune);
}

TEST(DocumentReader, MissingFileIsAnInputErrorNamingIt) {
  try {
    DocumentReader reader("/nonexistent/file.txt", DocumentFormat::lines, 1000);
    FAIL() << "no error";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/file.txt"), std::string::npos);
  }
}

TEST(InputFiles, WalksFoldersSortedAndSkipsFortuneIndexes) {
  ScratchDir dir;
  write_text(dir / "in" / "b" / "z.txt", "z");
  write_text(dir / "in" / "a.txt", "a");
  write_text(dir / "in" / "b" / "fortune", "f");
  write_text(dir / "in" / "b" / "fortune.dat", "index");
  fs::create_symlink("fortune", dir / "in" / "b" / "fortune.u8");
  write_text(dir / "in" / "b" / "lonely.dat", "a data file that is not an index");
  write_text(dir / "in" / ".hidden" / "x.txt", "hidden");
  write_text(dir / "single.txt", "s");
  const auto files = resolve_inputs({(dir / "single.txt").string(), (dir / "in").string(), "-"});
  const std::vector<fs::path> expected = {dir / "single.txt", dir / "in" / "a.txt",
                                          dir / "in" / "b" / "fortune",
                                          dir / "in" / "b" / "lonely.dat",
                                          dir / "in" / "b" / "z.txt", "-"};
  EXPECT_EQ(files, expected);
}

TEST(InputFiles, MissingPathIsAnInputErrorNamingIt) {
  ScratchDir dir;
  write_text(dir / "ok.txt", "ok");
  const std::string missing = (dir / "no_such_input.txt").string();
  try {
    resolve_inputs({(dir / "ok.txt").string(), missing});
    FAIL() << "no error";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find(missing), std::string::npos) << e.what();
  }
  fs::create_directories(dir / "empty");
  EXPECT_THROW(resolve_inputs({(dir / "empty").string()}), InputError);
  EXPECT_THROW(resolve_inputs({}), InputError);
}

}  // namespace
}  // namespace gradbox::data
