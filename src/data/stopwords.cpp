#include "data/stopwords.h"

#include <fstream>
#include <sstream>

#include "common/error.h"
#include "data/words.h"

namespace gradbox::data {
namespace {

// Short, high-frequency function words only: the check wants "contains some", not recall.
constexpr const char* kEnglish =
    "a about above after again against all am an and any are as at be because been before "
    "being below between both but by can could did do does doing down during each few for "
    "from further had has have having he her here hers herself him himself his how i if in "
    "into is it its itself just me more most my myself no nor not now of off on once only or "
    "other our ours ourselves out over own same she should so some such than that the their "
    "theirs them themselves then there these they this those through to too under until up "
    "very was we were what when where which while who whom why will with would you your "
    "yours yourself yourselves";

constexpr const char* kRussian =
    "а без более бы был была были было быть в вам вас весь во вот все всего всех вы где да "
    "даже для до его ее ей ему если есть еще ж же за здесь и из или им их к как какая какой "
    "когда кто ли либо между меня мне много может мой мы на над надо нас не него нее нельзя "
    "нет ни них но ну о об однако он она они оно от очень по под после потому при про с со "
    "так также такой там те тем то того тоже только том тот тут ты у уж уже хоть чем через "
    "что чтобы чуть эта эти это этого этой этом этот эту я";

std::vector<std::string> split_spaces(std::string_view text) {
  std::vector<std::string> words;
  std::istringstream in{std::string(text)};
  for (std::string w; in >> w;) words.push_back(w);
  return words;
}

}  // namespace

StopWords::StopWords(const std::vector<std::string>& words) {
  for (const auto& w : words) {
    std::string folded = fold_word(w);
    if (!folded.empty()) words_.insert(std::move(folded));
  }
}

StopWords StopWords::english() { return StopWords(split_spaces(kEnglish)); }
StopWords StopWords::russian() { return StopWords(split_spaces(kRussian)); }

StopWords StopWords::builtin() {
  std::vector<std::string> words = split_spaces(kEnglish);
  for (auto& w : split_spaces(kRussian)) words.push_back(std::move(w));
  return StopWords(words);
}

StopWords StopWords::load(const std::filesystem::path& file) {
  std::ifstream in(file);
  GB_REQUIRE(in, "--stopwords ", file.string(), ": cannot open");
  std::vector<std::string> words;
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || line[0] == '#') continue;
    for (auto& w : split_spaces(line)) words.push_back(std::move(w));
  }
  GB_REQUIRE(!in.bad(), "--stopwords ", file.string(), ": read failed");
  StopWords result(words);
  GB_REQUIRE(result.size() > 0, "--stopwords ", file.string(), ": holds no words");
  return result;
}

int64_t StopWords::count_in(std::string_view text, int64_t enough) const {
  int64_t count = 0;
  if (enough <= 0) return 0;
  for_each_word(text, [&](std::string_view w) {
    if (contains(w)) ++count;
    return count < enough;
  });
  return count;
}

}  // namespace gradbox::data
