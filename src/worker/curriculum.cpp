#include "worker/curriculum.h"

#include "common/error.h"
#include "common/whole_number.h"

namespace gradbox::worker {
namespace {

std::vector<std::string> split(const std::string& text, char separator) {
  std::vector<std::string> parts;
  size_t at = 0;
  while (true) {
    const size_t next = text.find(separator, at);
    parts.push_back(text.substr(at, next == std::string::npos ? std::string::npos : next - at));
    if (next == std::string::npos) return parts;
    at = next + 1;
  }
}

int64_t number(const std::string& text, const std::string& spec, const std::string& stage) {
  const std::optional<int64_t> value = parse_whole_number(text);
  GB_REQUIRE(value.has_value(), "--curriculum ", spec, ": stage '", stage, "': '", text,
             "' is not a whole number (stages are STEP:BLOCK or STEP:BLOCK:ACCUM)");
  return *value;
}

}  // namespace

Curriculum Curriculum::parse(const std::string& text, int64_t max_block) {
  Curriculum c;
  if (text.empty()) return c;
  for (const std::string& stage : split(text, ',')) {
    const std::vector<std::string> fields = split(stage, ':');
    GB_REQUIRE(fields.size() == 2 || fields.size() == 3, "--curriculum ", text, ": stage '", stage,
               "' is not STEP:BLOCK or STEP:BLOCK:ACCUM");
    CurriculumStage s;
    s.from_step = number(fields[0], text, stage);
    s.block = number(fields[1], text, stage);
    if (fields.size() == 3) s.grad_accum = number(fields[2], text, stage);
    GB_REQUIRE(s.from_step >= 1, "--curriculum ", text, ": stage '", stage, "' starts at step ", s.from_step,
               " (steps count from 1)");
    GB_REQUIRE(c.stages_.empty() || s.from_step > c.stages_.back().from_step, "--curriculum ", text, ": stage '", stage,
               "' does not start after the stage before it");
    GB_REQUIRE(s.block >= 1 && s.block <= max_block, "--curriculum ", text, ": stage '", stage, "': a block of ",
               s.block, " tokens, outside [1, ", max_block, "] (the run's block size)");
    GB_REQUIRE(!s.grad_accum || *s.grad_accum >= 1, "--curriculum ", text, ": stage '", stage,
               "': accumulation must be >= 1");
    c.stages_.push_back(s);
  }
  return c;
}

std::optional<CurriculumStage> Curriculum::at(int64_t step) const {
  std::optional<CurriculumStage> found;
  for (const CurriculumStage& s : stages_) {
    if (s.from_step > step) break;
    found = s;
  }
  return found;
}

}  // namespace gradbox::worker
