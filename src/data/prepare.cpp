#include "data/prepare.h"

#include <chrono>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "common/atomic_file.h"
#include "common/error.h"
#include "common/log.h"
#include "data/dataset_meta.h"
#include "data/doc_spool.h"
#include "data/input_files.h"
#include "data/parallel_encoder.h"
#include "tokenizer/tokenizer.h"

namespace gradbox::data {

namespace fs = std::filesystem;

fs::path gpt2_files(const PrepareOptions& options) {
  return options.gpt2_dir.empty() ? fs::path(GRADBOX_GPT2_DIR) : options.gpt2_dir;
}
using nlohmann::json;
using Clock = std::chrono::steady_clock;

namespace {

void validate(const PrepareOptions& o) {
  const QualityOptions& q = o.cleaning.quality;
  GB_REQUIRE(!o.out.empty(), "--out: an output folder is required");
  GB_REQUIRE(o.max_doc_bytes >= 1, "--max-doc-bytes must be positive, got ", o.max_doc_bytes);
  GB_REQUIRE(q.min_chars >= 0, "--min-chars must be >= 0, got ", q.min_chars);
  GB_REQUIRE(q.max_chars >= 1 && q.max_chars >= q.min_chars, "--max-chars must be >= 1 and >= ",
             "--min-chars (", q.min_chars, "), got ", q.max_chars);
  GB_REQUIRE(q.min_stopwords >= 0, "--min-stopwords must be >= 0, got ", q.min_stopwords);
  auto ratio = [](double v, const char* flag) {
    GB_REQUIRE(v >= 0.0 && v <= 1.0, flag, " must be in [0, 1], got ", v);
  };
  ratio(q.min_letter_ratio, "--min-letter-ratio");
  ratio(q.max_special_ratio, "--max-special-ratio");
  ratio(q.min_script_ratio, "--min-script-ratio");
  GB_REQUIRE(o.cleaning.simhash_threshold >= 0 &&
                 o.cleaning.simhash_threshold <= SimHashIndex::kMaxThreshold,
             "--simhash-threshold must be in [0, ", SimHashIndex::kMaxThreshold, "], got ",
             o.cleaning.simhash_threshold);
  GB_REQUIRE(o.cleaning.simhash_shingle_words >= 1 &&
                 o.cleaning.simhash_shingle_words <= kMaxShingleWords,
             "--simhash-shingle must be in [1, ", kMaxShingleWords, "], got ",
             o.cleaning.simhash_shingle_words);
  GB_REQUIRE(o.cleaning.simhash_capacity >= 0 && o.cleaning.simhash_capacity < (int64_t{1} << 31),
             "--simhash-capacity must be in [0, 2^31) (0 turns near-duplicate removal off), got ",
             o.cleaning.simhash_capacity);
  GB_REQUIRE(o.val_fraction >= 0.0 && o.val_fraction < 1.0, "--val-fraction must be in [0, 1), got ",
             o.val_fraction);
  GB_REQUIRE(o.threads >= 0, "--threads must be >= 0, got ", o.threads);
  if (o.tokenizer == TokenizerChoice::gpt2) {
    const fs::path dir = gpt2_files(o);
    for (const char* name : {"encoder.json", "vocab.bpe"}) {
      std::error_code ec;
      GB_REQUIRE(fs::is_regular_file(dir / name, ec), "--gpt2-dir ", dir.string(), ": no ", name,
                 " there (GPT-2's encoder.json and vocab.bpe are needed)");
    }
  } else {
    GB_REQUIRE(o.vocab_size >= 260 && o.vocab_size <= (1 << 24),
               "--vocab-size must be in [260, 16777216] (256 byte pieces + 3 specials + merges), got ",
               o.vocab_size);
    GB_REQUIRE(o.bpe_max_sentences >= 1, "--bpe-max-sentences must be positive, got ",
               o.bpe_max_sentences);
  }
}

std::unique_ptr<tokenizer::Tokenizer> load_gpt2(const fs::path& dir) {
  return tokenizer::load_gpt2_bpe(dir / "encoder.json", dir / "vocab.bpe");
}

std::string mb(int64_t bytes) { return str(static_cast<double>(bytes / 10000) / 100.0, " MB"); }

std::string mb_per_s(int64_t bytes, double seconds) {
  const double rate = static_cast<double>(bytes) / 1e6 / std::max(seconds, 1e-9);
  return str(static_cast<double>(static_cast<int64_t>(rate * 10)) / 10.0, " MB/s");
}

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// Runs every input document through the cleaner and calls kept(text) for the kept ones, with
// a progress line every few seconds.
template <class Fn>
void clean_inputs(const std::vector<fs::path>& files, const PrepareOptions& options,
                  TextCleaner& cleaner, const log::Logger& log, Fn&& kept) {
  const Clock::time_point start = Clock::now();
  Clock::time_point last_log = start;
  // The ETA takes document bytes for file bytes (markup and compression make it approximate).
  int64_t input_bytes = 0;
  for (const fs::path& file : files) {
    std::error_code ec;
    const auto size = fs::file_size(file, ec);
    if (!ec) input_bytes += static_cast<int64_t>(size);
  }
  Document doc;
  int64_t count = 0;
  for (size_t i = 0; i < files.size(); ++i) {
    DocumentReader reader(files[i], options.format, options.max_doc_bytes);
    log.debug(str("reading ", files[i].string(), " as ", format_name(reader.format())));
    while (reader.next(doc)) {
      if (cleaner.check(doc) == Verdict::kept) kept(trim_text(doc.text));
      if (++count % 4096 == 0 && Clock::now() - last_log > std::chrono::seconds(10)) {
        last_log = Clock::now();
        const CleaningReport& r = cleaner.report();
        const double seconds = seconds_since(start);
        const double left = static_cast<double>(std::max<int64_t>(0, input_bytes - r.total_bytes()));
        const int64_t eta_s = static_cast<int64_t>(left * seconds / std::max<double>(1.0, static_cast<double>(r.total_bytes())));
        log.info(str("file ", i + 1, "/", files.size(), ": read ", r.total_docs(), " docs, ", mb(r.total_bytes()), " of ~",
                     mb(input_bytes), " (", mb_per_s(r.total_bytes(), seconds), "), kept ", r.docs_of(Verdict::kept),
                     ", ETA ~", eta_s, " s"));
      }
    }
  }
}

// The trainer reads one document per line; it only needs statistics, so newlines become spaces.
class BpeCorpusWriter {
 public:
  explicit BpeCorpusWriter(fs::path path) : path_(std::move(path)), out_(path_, std::ios::binary) {
    GB_REQUIRE(out_, path_.string(), ": cannot create");
  }
  void write(std::string_view doc) {
    line_.assign(doc);
    for (char& c : line_)
      if (c == '\n' || c == '\r') c = ' ';
    line_.push_back('\n');
    out_.write(line_.data(), static_cast<std::streamsize>(line_.size()));
  }
  void close() {
    out_.close();
    GB_REQUIRE(out_, path_.string(), ": write failed");
  }

 private:
  fs::path path_;
  std::ofstream out_;
  std::string line_;
};

json cleaning_json(const CleaningReport& r) {
  json dropped = json::object();
  for (size_t i = 1; i < kVerdictCount; ++i)
    dropped[std::string(verdict_name(static_cast<Verdict>(i)))] = {{"docs", r.docs[i]},
                                                                   {"bytes", r.bytes[i]}};
  return {{"read", {{"docs", r.total_docs()}, {"bytes", r.total_bytes()}}},
          {"kept", {{"docs", r.docs_of(Verdict::kept)}, {"bytes", r.bytes_of(Verdict::kept)}}},
          {"dropped", dropped}};
}

std::string report_json(const PrepareOptions& options, const PrepareReport& report) {
  json j = {
      {"options", json::parse(options_json(options))},
      {"input_files", report.input_files},
      {"cleaning", cleaning_json(report.cleaning)},
      {"simhash",
       {{"fingerprints", report.simhash_fingerprints}, {"evicted", report.simhash_evicted}}},
      {"tokenizer", report.tokenizer},
      {"vocab_size", report.vocab_size},
      {"train", {{"docs", report.split.train_docs}, {"tokens", report.split.train_tokens}}},
      {"val", {{"docs", report.split.val_docs}, {"tokens", report.split.val_tokens}}},
      {"seconds", report.seconds},
  };
  return j.dump(2) + "\n";
}

}  // namespace

TokenizerChoice parse_tokenizer_choice(std::string_view name) {
  if (name == "gpt2") return TokenizerChoice::gpt2;
  if (name == "bpe") return TokenizerChoice::bpe;
  throw InputError(str("--tokenizer: unknown tokenizer '", name, "' (gpt2, bpe)"));
}

std::string_view tokenizer_choice_name(TokenizerChoice choice) {
  return choice == TokenizerChoice::gpt2 ? "gpt2" : "bpe";
}

std::string options_json(const PrepareOptions& o) {
  const QualityOptions& q = o.cleaning.quality;
  json j = {
      {"inputs", o.inputs},
      {"out", o.out.string()},
      {"format", format_name(o.format)},
      {"max_doc_bytes", o.max_doc_bytes},
      {"min_chars", q.min_chars},
      {"max_chars", q.max_chars},
      {"min_stopwords", q.min_stopwords},
      {"stopwords", o.stopwords_file ? o.stopwords_file->string() : std::string("builtin:en+ru")},
      {"min_letter_ratio", q.min_letter_ratio},
      {"max_special_ratio", q.max_special_ratio},
      {"script", script_filter_name(q.script)},
      {"min_script_ratio", q.min_script_ratio},
      {"simhash_threshold", o.cleaning.simhash_threshold},
      {"simhash_shingle", o.cleaning.simhash_shingle_words},
      {"simhash_capacity", o.cleaning.simhash_capacity},
      {"tokenizer", tokenizer_choice_name(o.tokenizer)},
      {"val_fraction", o.val_fraction},
      {"seed", o.seed},
      {"threads", o.threads},
      {"force", o.overwrite == Overwrite::force},
  };
  if (o.tokenizer == TokenizerChoice::gpt2) {
    j["gpt2_dir"] = o.gpt2_dir.string();
  } else {
    j["vocab_size"] = o.vocab_size;
    j["bpe_max_sentences"] = o.bpe_max_sentences;
  }
  return j.dump();
}

PrepareReport prepare_dataset(const PrepareOptions& options) {
  const log::Logger log("data");
  const Clock::time_point start = Clock::now();
  validate(options);
  log.info("prepare: " + options_json(options));

  // Everything that can be checked is checked before the output folder is touched.
  const std::vector<fs::path> files = resolve_inputs(options.inputs);
  StopWords stop_words =
      options.stopwords_file ? StopWords::load(*options.stopwords_file) : StopWords::builtin();
  std::unique_ptr<tokenizer::Tokenizer> tok;
  if (options.tokenizer == TokenizerChoice::gpt2) tok = load_gpt2(gpt2_files(options));
  const int32_t threads =
      options.threads > 0 ? options.threads
                          : std::max(1, static_cast<int32_t>(std::thread::hardware_concurrency()));

  OutputFolder out(options.out, options.overwrite);
  TextCleaner cleaner(options.cleaning, std::move(stop_words));
  if (cleaner.index())
    log.info(str("near-duplicate index: threshold ", cleaner.index()->threshold(), " bits, up to ",
                 cleaner.index()->capacity(), " fingerprints (", mb(cleaner.index()->memory_bytes()),
                 " when full, then FIFO eviction)"));
  log.info(str("reading ", files.size(), " input file(s)"));

  PrepareReport report;
  report.input_files = static_cast<int64_t>(files.size());
  auto encode_into_shards = [&](const std::function<void(ParallelEncoder&)>& feed) {
    SplitShardWriter shards(out.dir(), tok->vocab_size(), tok->eot_id(), options.val_fraction,
                            options.seed);
    ParallelEncoder encoder(*tok, threads, [&](std::string_view text, std::vector<int32_t> ids) {
      shards.add(text, std::move(ids));
    });
    feed(encoder);
    encoder.finish();
    report.split = shards.finish();
    out.track("train.bin");
    out.track("val.bin");
  };
  auto require_kept = [&] {
    log.info("cleaning: " + cleaner.report().summary());
    GB_REQUIRE(cleaner.report().docs_of(Verdict::kept) > 0,
               "no document survived cleaning (", cleaner.report().summary(),
               "); check --format and the filter flags");
  };

  if (options.tokenizer == TokenizerChoice::gpt2) {
    encode_into_shards([&](ParallelEncoder& encoder) {
      clean_inputs(files, options, cleaner, log, [&](std::string_view text) { encoder.push(text); });
    });
    require_kept();
  } else {
    const fs::path spool_path = out.scratch() / "cleaned.docs";
    const fs::path corpus_path = out.scratch() / "bpe_corpus.txt";
    {
      SpoolWriter spool(spool_path);
      BpeCorpusWriter corpus(corpus_path);
      clean_inputs(files, options, cleaner, log, [&](std::string_view text) {
        spool.write(text);
        corpus.write(text);
      });
      spool.close();
      corpus.close();
    }
    require_kept();
    log.info(str("training a ", options.vocab_size, "-token BPE on the cleaned text (",
                 mb(cleaner.report().bytes_of(Verdict::kept)), ")"));
    tokenizer::BpeTrainOptions bpe;
    bpe.vocab_size = options.vocab_size;
    bpe.max_sentences = options.bpe_max_sentences;
    bpe.threads = threads;
    bpe.seed = options.seed;
    tok = tokenizer::train_bpe(corpus_path, bpe, out.scratch() / "bpe");
    log.info("tokenizing the cleaned text");
    encode_into_shards([&](ParallelEncoder& encoder) {
      SpoolReader spool(spool_path);
      for (std::string doc; spool.next(doc);) encoder.push(doc);
    });
  }

  tok->save(out.scratch() / "tokenizer");
  out.install_dir(out.scratch() / "tokenizer", "tokenizer");

  report.cleaning = cleaner.report();
  report.vocab_size = tok->vocab_size();
  report.tokenizer = tok->kind();
  if (cleaner.index()) {
    report.simhash_fingerprints = cleaner.index()->size();
    report.simhash_evicted = cleaner.index()->evicted();
  }
  report.seconds = seconds_since(start);
  write_file_atomic(out.dir() / "report.json", report_json(options, report));
  out.track("report.json");

  DatasetMeta meta;
  meta.dtype = std::string(dtype_name(dtype_for_vocab(tok->vocab_size())));
  meta.vocab_size = tok->vocab_size();
  meta.eot_id = tok->eot_id();
  meta.tokenizer = tok->kind();
  meta.train_tokens = report.split.train_tokens;
  meta.val_tokens = report.split.val_tokens;
  meta.train_checksum = report.split.train_checksum;
  meta.val_checksum = report.split.val_checksum;
  meta.docs_read = report.cleaning.total_docs();
  meta.docs_kept = report.cleaning.docs_of(Verdict::kept);
  meta.train_docs = report.split.train_docs;
  meta.val_docs = report.split.val_docs;
  meta.val_fraction = options.val_fraction;
  meta.seed = options.seed;
  out.commit(dataset_meta_json(meta));

  log.info(str("prepared ", options.out.string(), ": ", report.split.train_tokens, " train tokens (",
               report.split.train_docs, " docs), ", report.split.val_tokens, " val tokens (",
               report.split.val_docs, " docs), ", tok->kind(), " vocab ", tok->vocab_size(), ", ",
               dtype_name(dtype_for_vocab(tok->vocab_size())), ", in ",
               static_cast<double>(static_cast<int64_t>(report.seconds * 10)) / 10.0, " s (",
               mb_per_s(report.cleaning.total_bytes(), report.seconds), " of input)"));
  return report;
}

}  // namespace gradbox::data
