#include "data/parallel_encoder.h"

#include "common/error.h"

namespace gradbox::data {

namespace {
constexpr size_t kBatchBytes = 1 << 20;
}  // namespace

ParallelEncoder::ParallelEncoder(const tokenizer::Tokenizer& tokenizer, int32_t threads, Sink sink)
    : tokenizer_(tokenizer), threads_(threads), sink_(std::move(sink)) {
  GB_CHECK(threads_ >= 1, "threads ", threads_);
}

ParallelEncoder::~ParallelEncoder() {
  for (auto& f : in_flight_)
    if (f.valid()) f.wait();
}

void ParallelEncoder::push(std::string_view text) {
  if (!open_) open_ = std::make_unique<Batch>();
  open_->texts.emplace_back(text);
  open_->bytes += text.size();
  if (open_->bytes >= kBatchBytes) launch();
}

void ParallelEncoder::launch() {
  if (!open_) return;
  if (static_cast<int32_t>(in_flight_.size()) >= threads_) deliver_oldest();
  in_flight_.push_back(std::async(
      std::launch::async, [this, batch = std::move(open_)]() mutable {
        batch->tokens.reserve(batch->texts.size());
        for (const std::string& text : batch->texts) batch->tokens.push_back(tokenizer_.encode(text));
        return std::move(batch);
      }));
}

void ParallelEncoder::deliver_oldest() {
  std::unique_ptr<Batch> batch = in_flight_.front().get();
  in_flight_.pop_front();
  for (size_t i = 0; i < batch->texts.size(); ++i)
    sink_(batch->texts[i], std::move(batch->tokens[i]));
}

void ParallelEncoder::finish() {
  launch();
  while (!in_flight_.empty()) deliver_oldest();
}

}  // namespace gradbox::data
