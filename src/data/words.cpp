#include "data/words.h"

namespace gradbox::data {

std::string fold_word(std::string_view word) {
  std::string folded;
  for_each_word(word, [&](std::string_view w) {
    folded.append(w);
    return true;
  });
  return folded;
}

}  // namespace gradbox::data
