#pragma once
// Note [Curriculum]
// YaLM's curriculum: short sequences and small batches first, growing during training.
// --curriculum "STEP:BLOCK[:ACCUM],..." gives stages, each from its step on (steps count from 1,
// as metrics.jsonl does): sequences of BLOCK tokens (at most the run's --block-size) and, when
// given, ACCUM micro-batches per step (else --grad-accum). Before the first stage the flags hold.
// A live control's micro_batch and grad_accum still win over a stage's (Note [Live control]).
//
// Why replicas need not agree on it: every contribution carries the tokens it was computed on
// (micro-batches x micro-batch x BLOCK), and the averages are token-weighted, so workers on
// different stages (a joiner that starts at another step, a worker with its own schedule)
// average correctly, as workers with different batches always have. The learning-rate schedule
// stays by step. Evaluation keeps the full block. Torch-free.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace gradbox::worker {

struct CurriculumStage {
  int64_t from_step = 1;
  int64_t block = 0;
  std::optional<int64_t> grad_accum;
  bool operator==(const CurriculumStage&) const = default;
};

class Curriculum {
 public:
  Curriculum() = default;
  // InputError naming --curriculum: malformed, steps not increasing, a block outside
  // [1, max_block], an accumulation below 1.
  static Curriculum parse(const std::string& text, int64_t max_block);

  bool empty() const { return stages_.empty(); }
  // The stage step `step` trains in (steps count from 1); nullopt before the first.
  std::optional<CurriculumStage> at(int64_t step) const;
  const std::vector<CurriculumStage>& stages() const { return stages_; }

 private:
  std::vector<CurriculumStage> stages_;  // by from_step, increasing
};

}  // namespace gradbox::worker
