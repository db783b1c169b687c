// Encode throughput on real text, off the unit-test path:
//   tokenizer_bench FILE [THREADS] [SPM_VOCAB]
// GPT-2 BPE (official files from GRADBOX_GPT2_DIR) with a cold and a warm word
// cache, then with THREADS threads; a SentencePiece BPE of SPM_VOCAB pieces trained on FILE.
// Every result is verified (decode(encode(x)) == x, same ids across runs) before it is printed.
#include <barrier>
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "common/atomic_file.h"
#include "tokenizer/gpt2_bpe.h"
#include "tokenizer/tokenizer.h"

namespace {

using namespace gradbox;
using namespace gradbox::tokenizer;
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// Splits text at line ends into about n pieces, as a data loader would hand out documents.
std::vector<std::string_view> chunks(std::string_view text, int n) {
  std::vector<std::string_view> out;
  size_t begin = 0;
  for (int i = 1; i <= n && begin < text.size(); ++i) {
    size_t end = i == n ? text.size() : text.find('\n', text.size() * i / n);
    end = end == std::string_view::npos ? text.size() : end + 1;
    out.push_back(text.substr(begin, end - begin));
    begin = end;
  }
  return out;
}

// Encodes the chunks on `threads` threads, four times: three passes warm the word caches
// (one per concurrent encode, lent to whichever thread asks), the last is timed. Returns its
// seconds and checks the ids.
double parallel_encode(const Tokenizer& tok, std::string_view text, int threads) {
  const std::vector<std::string_view> parts = chunks(text, threads * 8);
  std::vector<std::vector<int32_t>> ids(parts.size());
  std::barrier sync(threads + 1);
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t)
    pool.emplace_back([&, t] {
      for (int pass = 0; pass < 4; ++pass) {
        sync.arrive_and_wait();
        for (size_t i = t; i < parts.size(); i += threads) ids[i] = tok.encode(parts[i]);
      }
    });
  for (int pass = 0; pass < 4; ++pass) sync.arrive_and_wait();  // the last one is timed
  const auto start = Clock::now();
  for (auto& th : pool) th.join();
  const double s = seconds_since(start);
  std::vector<int32_t> all;
  for (const auto& part : ids) all.insert(all.end(), part.begin(), part.end());
  if (tok.decode(all) != text) std::printf("  ERROR: parallel round trip differs\n");
  return s;
}

int run(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s FILE [THREADS] [SPM_VOCAB]\n", argv[0]);
    return 2;
  }
  const std::string text = read_file(argv[1]);
  const int threads = argc > 2 ? std::stoi(argv[2]) : 2;
  const int spm_vocab = argc > 3 ? std::stoi(argv[3]) : 8000;
  const double mb = static_cast<double>(text.size()) / 1e6;
  std::printf("%s: %.2f MB\n", argv[1], mb);
  int failures = 0;

  const fs::path gpt2 = fs::path(GRADBOX_GPT2_DIR);
  if (fs::is_regular_file(gpt2 / "encoder.json")) {
    auto start = Clock::now();
    auto tok = load_tokenizer(gpt2);
    std::printf("gpt2-bpe: load %.3f s\n", seconds_since(start));
    start = Clock::now();
    const std::vector<int32_t> ids = tok->encode(text);
    const double cold = seconds_since(start);
    start = Clock::now();
    const std::vector<int32_t> again = tok->encode(text);
    const double warm = seconds_since(start);
    start = Clock::now();
    const std::string back = tok->decode(ids);
    const double dec = seconds_since(start);
    const bool ok = back == text && again == ids;
    failures += !ok;
    std::printf("gpt2-bpe: %zu tokens (%.2f bytes/token) round trip %s\n", ids.size(),
                text.size() / static_cast<double>(ids.size()), ok ? "exact" : "WRONG");
    std::printf("gpt2-bpe: encode cold cache %.1f MB/s, warm cache %.1f MB/s, decode %.0f MB/s\n",
                mb / cold, mb / warm, mb / dec);
    const double par = parallel_encode(*tok, text, threads);
    std::printf("gpt2-bpe: encode %d threads (warm caches) %.1f MB/s = %.2fx one thread\n", threads,
                mb / par, warm / par);
  } else {
    std::printf("gpt2-bpe: skipped, no files in %s\n", gpt2.c_str());
  }

  const fs::path dir = fs::temp_directory_path() / ("gradbox_bench_" + std::to_string(::getpid()));
  BpeTrainOptions options;
  options.vocab_size = spm_vocab;
  auto start = Clock::now();
  auto spm = train_bpe(argv[1], options, dir);
  std::printf("sentencepiece: trained %d pieces in %.2f s\n", spm->vocab_size(),
              seconds_since(start));
  start = Clock::now();
  const std::vector<int32_t> ids = spm->encode(text);
  const double cold = seconds_since(start);
  start = Clock::now();
  const std::vector<int32_t> again = spm->encode(text);
  const double warm = seconds_since(start);
  const bool ok = spm->decode(ids) == text && again == ids;
  failures += !ok;
  std::printf("sentencepiece: %zu tokens (%.2f bytes/token) round trip %s\n", ids.size(),
              text.size() / static_cast<double>(ids.size()), ok ? "exact" : "WRONG");
  std::printf("sentencepiece: encode cold cache %.1f MB/s, warm cache %.1f MB/s\n", mb / cold,
              mb / warm);
  const double par = parallel_encode(*spm, text, threads);
  std::printf("sentencepiece: encode %d threads (warm caches) %.1f MB/s = %.2fx one thread\n",
              threads, mb / par, warm / par);
  fs::remove_all(dir);
  return failures == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
