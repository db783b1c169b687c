#pragma once
// Tokenizes documents on several threads and hands them on in their original order, so the
// token files do not depend on the thread count. Documents are grouped into batches of about
// 1 MiB; each batch is encoded by its own task, and at most `threads` batches are in flight,
// which bounds memory. Tokenizer::encode is const and thread-safe (tokenizer.h).
#include <cstdint>
#include <deque>
#include <functional>
#include <future>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace gradbox::data {

class ParallelEncoder {
 public:
  using Sink = std::function<void(std::string_view text, std::vector<int32_t> tokens)>;

  ParallelEncoder(const tokenizer::Tokenizer& tokenizer, int32_t threads, Sink sink);
  ~ParallelEncoder();  // waits for batches still running (their results are dropped)

  void push(std::string_view text);
  // Encodes what is left and passes everything to the sink. Rethrows an encoding error.
  void finish();

 private:
  struct Batch {
    std::vector<std::string> texts;
    std::vector<std::vector<int32_t>> tokens;
    size_t bytes = 0;
  };

  void launch();
  void deliver_oldest();

  const tokenizer::Tokenizer& tokenizer_;
  int32_t threads_;
  Sink sink_;
  std::unique_ptr<Batch> open_;
  std::deque<std::future<std::unique_ptr<Batch>>> in_flight_;
};

}  // namespace gradbox::data
