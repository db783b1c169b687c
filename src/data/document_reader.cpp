#include "data/document_reader.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>
#include <vector>

#include "common/error.h"

namespace gradbox::data {

namespace fs = std::filesystem;

// A file descriptor with a fixed read buffer. Lines are handed out piecewise, so a line of any
// length costs at most the caller's cap in memory.
class ByteSource {
 public:
  explicit ByteSource(const fs::path& path) : path_(path), buffer_(kBufferBytes) {
    if (path == "-") {
      fd_ = STDIN_FILENO;
      owns_fd_ = false;
    } else {
      fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
      if (fd_ < 0)
        throw InputError(str(path.string(), ": cannot open: ", std::strerror(errno)));
      ::posix_fadvise(fd_, 0, 0, POSIX_FADV_SEQUENTIAL);
    }
  }
  ~ByteSource() {
    if (owns_fd_) ::close(fd_);
  }
  ByteSource(const ByteSource&) = delete;
  ByteSource& operator=(const ByteSource&) = delete;

  // Up to `want` bytes from the start of the input, without consuming them. Only valid before
  // the first read_line().
  std::string_view peek(size_t want) {
    GB_CHECK(pos_ == 0 && want <= buffer_.size(), "peek after reading, or too far: ", want);
    while (end_ < want && !eof_) read_more();
    return {buffer_.data(), std::min(end_, want)};
  }

  // Appends the next line (without its '\n' or a '\r' before it) to `out`, keeping out.size()
  // at most `cap`. Returns false at the end of input. Sets line_bytes to the bytes consumed,
  // and truncated when some of the line did not fit.
  bool read_line(std::string& out, size_t cap, int64_t& line_bytes, bool& truncated) {
    line_bytes = 0;
    truncated = false;
    if (pos_ == end_) {
      refill();
      if (pos_ == end_) return false;
    }
    const size_t start_size = out.size();
    while (true) {
      if (pos_ == end_) {
        refill();
        if (pos_ == end_) break;  // last line without '\n'
      }
      const char* begin = buffer_.data() + pos_;
      const size_t avail = end_ - pos_;
      const auto* newline = static_cast<const char*>(std::memchr(begin, '\n', avail));
      const size_t n = newline ? static_cast<size_t>(newline - begin) : avail;
      const size_t room = cap > out.size() ? cap - out.size() : 0;
      const size_t take = std::min(n, room);
      out.append(begin, take);
      if (take < n) truncated = true;
      pos_ += n;
      line_bytes += static_cast<int64_t>(n);
      if (newline) {
        ++pos_;
        ++line_bytes;
        break;
      }
    }
    if (!truncated && out.size() > start_size && out.back() == '\r') out.pop_back();
    return true;
  }

 private:
  static constexpr size_t kBufferBytes = 256 * 1024;

  void refill() {
    pos_ = end_ = 0;
    if (!eof_) read_more();
  }

  void read_more() {
    while (true) {
      const ssize_t n = ::read(fd_, buffer_.data() + end_, buffer_.size() - end_);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) throw InputError(str(path_.string(), ": read failed: ", std::strerror(errno)));
      if (n == 0) eof_ = true;
      end_ += static_cast<size_t>(n);
      return;
    }
  }

  fs::path path_;
  std::vector<char> buffer_;
  int fd_ = -1;
  bool owns_fd_ = true;
  size_t pos_ = 0;
  size_t end_ = 0;
  bool eof_ = false;
};

std::string_view trim_text(std::string_view text) {
  constexpr std::string_view kSpace = " \t\n\r\f\v";
  const size_t begin = text.find_first_not_of(kSpace);
  if (begin == std::string_view::npos) return {};
  const size_t end = text.find_last_not_of(kSpace);
  return text.substr(begin, end - begin + 1);
}

namespace {

bool is_blank(std::string_view line) { return trim_text(line).empty(); }

bool in_fortunes_folder(const fs::path& path) {
  for (const auto& part : path.parent_path())
    if (part == "fortunes") return true;
  return false;
}

}  // namespace

DocumentFormat parse_document_format(std::string_view name) {
  if (name == "auto") return DocumentFormat::detect;
  if (name == "lines") return DocumentFormat::lines;
  if (name == "paragraphs") return DocumentFormat::paragraphs;
  if (name == "fortune") return DocumentFormat::fortune;
  if (name == "jsonl") return DocumentFormat::jsonl;
  throw InputError(
      str("--format: unknown format '", name, "' (auto, lines, paragraphs, fortune, jsonl)"));
}

std::string_view format_name(DocumentFormat format) {
  switch (format) {
    case DocumentFormat::detect: return "auto";
    case DocumentFormat::lines: return "lines";
    case DocumentFormat::paragraphs: return "paragraphs";
    case DocumentFormat::fortune: return "fortune";
    case DocumentFormat::jsonl: return "jsonl";
  }
  GB_CHECK(false, "unknown format ", static_cast<int>(format));
}

DocumentFormat detect_format(const fs::path& path, std::string_view head) {
  const std::string ext = path.extension().string();
  if (ext == ".jsonl" || ext == ".ndjson") return DocumentFormat::jsonl;
  if (ext.empty() && path != "-" && in_fortunes_folder(path)) return DocumentFormat::fortune;

  const size_t first = head.find_first_not_of(" \t\r\n");
  if (first != std::string_view::npos && head[first] == '{') return DocumentFormat::jsonl;

  // Whole lines only: the last one may be cut by the head limit.
  bool blank_between = false;
  bool seen_text = false;
  bool pending_blank = false;
  size_t pos = 0;
  while (pos < head.size()) {
    const size_t nl = head.find('\n', pos);
    if (nl == std::string_view::npos) break;
    std::string_view line = head.substr(pos, nl - pos);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    pos = nl + 1;
    if (line == "%") return DocumentFormat::fortune;
    if (is_blank(line)) {
      pending_blank = seen_text;
    } else {
      if (pending_blank) blank_between = true;
      seen_text = true;
    }
  }
  return blank_between ? DocumentFormat::paragraphs : DocumentFormat::lines;
}

DocumentReader::DocumentReader(const fs::path& path, DocumentFormat format,
                               int64_t max_doc_bytes)
    : path_(path),
      source_(std::make_unique<ByteSource>(path)),
      format_(format),
      max_doc_bytes_(static_cast<size_t>(max_doc_bytes)) {
  GB_CHECK(max_doc_bytes > 0, "max_doc_bytes ", max_doc_bytes);
  if (format_ == DocumentFormat::detect) format_ = detect_format(path, source_->peek(kDetectBytes));
}

DocumentReader::~DocumentReader() = default;

bool DocumentReader::next(Document& doc) {
  doc.text.clear();
  doc.bytes = 0;
  doc.status = DocumentStatus::ok;
  switch (format_) {
    case DocumentFormat::lines: return next_line(doc);
    case DocumentFormat::paragraphs:
    case DocumentFormat::fortune: return next_block(doc);
    case DocumentFormat::jsonl: return next_json(doc);
    case DocumentFormat::detect: break;
  }
  GB_CHECK(false, "reader format not resolved for ", path_);
}

bool DocumentReader::next_line(Document& doc) {
  bool truncated = false;
  while (true) {
    doc.text.clear();
    if (!source_->read_line(doc.text, max_doc_bytes_, doc.bytes, truncated)) return false;
    if (truncated) {
      doc.status = DocumentStatus::too_long;
      return true;
    }
    if (!is_blank(doc.text)) return true;
  }
}

bool DocumentReader::next_block(Document& doc) {
  const bool fortune = format_ == DocumentFormat::fortune;
  bool has_text = false;
  int64_t line_bytes = 0;
  bool truncated = false;
  while (true) {
    line_.clear();
    if (!source_->read_line(line_, max_doc_bytes_, line_bytes, truncated)) break;
    const bool blank = !truncated && is_blank(line_);
    const bool separator = fortune ? (!truncated && line_ == "%") : blank;
    if (separator) {
      if (has_text) return true;
      continue;  // an empty document ("%" twice, several blank lines): not a document
    }
    if (blank && !has_text) continue;  // blank lines before a fortune's text
    has_text = true;
    doc.bytes += line_bytes;
    if (doc.status == DocumentStatus::too_long) continue;  // skip to the separator
    const size_t joined = doc.text.size() + (doc.text.empty() ? 0 : 1) + line_.size();
    if (truncated || joined > max_doc_bytes_) {
      doc.status = DocumentStatus::too_long;
      continue;
    }
    if (!doc.text.empty()) doc.text.push_back('\n');
    doc.text.append(line_);
  }
  return has_text;
}

bool DocumentReader::next_json(Document& doc) {
  bool truncated = false;
  while (true) {
    line_.clear();
    if (!source_->read_line(line_, max_doc_bytes_, doc.bytes, truncated)) return false;
    if (truncated) {
      doc.status = DocumentStatus::too_long;
      return true;
    }
    if (is_blank(line_)) continue;
    const nlohmann::json j = nlohmann::json::parse(line_, nullptr, /*allow_exceptions=*/false);
    const auto it = j.is_object() ? j.find("text") : j.end();
    if (!j.is_object() || it == j.end() || !it->is_string()) {
      doc.status = DocumentStatus::malformed;
      return true;
    }
    doc.text = it->get<std::string>();
    if (doc.text.size() > max_doc_bytes_) {
      doc.text.resize(max_doc_bytes_);
      doc.status = DocumentStatus::too_long;
    }
    return true;
  }
}

}  // namespace gradbox::data
