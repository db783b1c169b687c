#pragma once
// Streaming document readers with constant memory: a fixed read buffer, and no document held
// beyond --max-doc-bytes (the rest of an over-long document is skipped, and it is reported as
// too_long).
//
// Formats:
//   lines       one document per line; blank lines are skipped
//   paragraphs  documents separated by blank (whitespace-only) lines; lines joined with '\n'
//   fortune     documents separated by lines holding only "%" (the fortune(6) file format);
//               blank lines inside a fortune are kept
//   jsonl       one JSON object per line, the document is its string field "text"
//   detect      ("auto" on the command line) chosen per file by detect_format()
// Line ends may be LF or CRLF; documents come out with LF. Whitespace-only documents are not
// documents and are skipped silently.
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>

namespace gradbox::data {

enum class DocumentFormat : uint8_t { detect, lines, paragraphs, fortune, jsonl };
DocumentFormat parse_document_format(std::string_view name);  // InputError naming --format
std::string_view format_name(DocumentFormat format);

// How many bytes from the start of a file detect_format() looks at.
inline constexpr size_t kDetectBytes = 64 * 1024;

// The format of a file from its path and first bytes:
//   *.jsonl / *.ndjson                          -> jsonl
//   no extension, in a folder named "fortunes"  -> fortune (/usr/share/games/fortunes/...)
//   first non-blank byte '{'                    -> jsonl
//   a line holding only "%"                     -> fortune
//   a blank line between text lines             -> paragraphs
//   otherwise                                   -> lines
DocumentFormat detect_format(const std::filesystem::path& path, std::string_view head);

enum class DocumentStatus : uint8_t {
  ok,
  too_long,   // longer than the cap; text holds only its first bytes
  malformed,  // jsonl line without a string "text" field
};

struct Document {
  std::string text;
  int64_t bytes = 0;  // the document's size in the input, including any bytes past the cap
  DocumentStatus status = DocumentStatus::ok;
};

// The text without surrounding ASCII whitespace: what the filters measure and what gets
// tokenized.
std::string_view trim_text(std::string_view text);

class ByteSource;

// Reads the documents of one file, or of standard input when the path is "-".
class DocumentReader {
 public:
  // Throws InputError naming the file when it cannot be opened.
  DocumentReader(const std::filesystem::path& path, DocumentFormat format,
                 int64_t max_doc_bytes);
  ~DocumentReader();
  DocumentReader(const DocumentReader&) = delete;
  DocumentReader& operator=(const DocumentReader&) = delete;

  // The next document, or false at the end of the input. Throws InputError naming the file
  // on a read error.
  bool next(Document& doc);

  DocumentFormat format() const { return format_; }  // never detect

 private:
  bool next_line(Document& doc);
  bool next_block(Document& doc);
  bool next_json(Document& doc);

  std::filesystem::path path_;
  std::unique_ptr<ByteSource> source_;
  DocumentFormat format_;
  size_t max_doc_bytes_;
  std::string line_;
};

}  // namespace gradbox::data
