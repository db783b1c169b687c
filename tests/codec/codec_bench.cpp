// Gradient codec on real GPT-2 124M gradients (a benchmark, not a test; run by hand):
//
//   codec_bench [--preset gpt2] [--batch 4] [--seq 128] [--warmup-steps 2] [--repeats 5]
//               [--text DIR_OR_FILE] [--tokenizer-dir DIR] [--dump PATH]
//
// Tokenizes English text (default: the fortune files) with the GPT-2 BPE, runs
// --warmup-steps AdamW steps (lr 3e-4) on successive batches, then one more forward+backward
// whose gradients, flattened into one fp32 vector, are what every mode encodes. Per mode it
// prints the compression ratio against the raw fp32 bytes, the relative L2 error, and the
// median over --repeats of encode (into a buffer kept across calls, as the exchange does) /
// decode / decode_accumulate throughput in GB/s of fp32 data, with 1 and 2 threads. It
// verifies each mode's error (fp32 bit exact, fp16 <= 2^-11, bf16 <= 2^-8 relative L2, int8 <= 0.02 and int4 <= 0.3 as sanity bounds (the per-element
// bound of half a block scale is what codec_test checks; Gaussian blocks of 256 give a
// relative L2 of about 0.007 for int8 and 0.12 for int4), no non-finite output) and exits 1
// on a violation.
//
// --dump PATH writes the gradient instead of benchmarking the modes, for benchmarks that need a
// real gradient without LibTorch (tests/exchange/exchange_bench.cpp): a little-endian u64
// element count n, then n little-endian fp32 values (8 + 4n bytes), written to PATH.tmp and
// renamed.
#include <torch/torch.h>

#include <algorithm>
#include <bit>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "codec/codec.h"
#include "model/causal_lm.h"
#include "tokenizer/tokenizer.h"

namespace {

namespace fs = std::filesystem;
using namespace gradbox;
using Clock = std::chrono::steady_clock;

struct Options {
  std::string preset = "gpt2";
  int64_t batch = 4, seq = 128, warmup_steps = 2, repeats = 5;
  std::string text = "/usr/share/games/fortunes";
  std::string tokenizer_dir = std::string(GRADBOX_GPT2_DIR);
  std::string dump;  // non-empty: write the gradient there and stop
};

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw std::runtime_error(a + " needs a value");
      return argv[++i];
    };
    if (a == "--preset") o.preset = value();
    else if (a == "--batch") o.batch = std::stoll(value());
    else if (a == "--seq") o.seq = std::stoll(value());
    else if (a == "--warmup-steps") o.warmup_steps = std::stoll(value());
    else if (a == "--repeats") o.repeats = std::stoll(value());
    else if (a == "--text") o.text = value();
    else if (a == "--tokenizer-dir") o.tokenizer_dir = value();
    else if (a == "--dump") o.dump = value();
    else throw std::runtime_error("unknown option " + a);
  }
  return o;
}

// Plain-text files only (the fortune folder also holds .dat indexes and .u8 links).
std::string read_text(const fs::path& where) {
  std::vector<fs::path> files;
  if (fs::is_directory(where)) {
    for (const auto& e : fs::directory_iterator(where)) {
      if (e.is_regular_file() && !e.path().has_extension()) files.push_back(e.path());
    }
  } else {
    files.push_back(where);
  }
  std::sort(files.begin(), files.end());
  std::string text;
  for (const auto& f : files) {
    std::ifstream in(f, std::ios::binary);
    std::ostringstream ss;
    ss << in.rdbuf();
    text += ss.str();
    if (text.size() > (2u << 20)) break;  // plenty for a few batches
  }
  if (text.empty()) throw std::runtime_error("no text in " + where.string());
  return text;
}

std::vector<float> flat_grads(model::CausalLM& m) {
  std::vector<float> out;
  for (const auto& p : m.parameters()) {
    if (!p.grad().defined()) continue;
    const auto g = p.grad().contiguous().to(torch::kFloat32);
    const float* d = g.data_ptr<float>();
    out.insert(out.end(), d, d + g.numel());
  }
  return out;
}

// u64 n, then n floats, little-endian (the only byte order this code builds for).
void dump_gradient(const std::vector<float>& grad, const std::string& path) {
  static_assert(std::endian::native == std::endian::little, "--dump writes the native byte order");
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    const uint64_t n = grad.size();
    out.write(reinterpret_cast<const char*>(&n), sizeof n);
    out.write(reinterpret_cast<const char*>(grad.data()), static_cast<std::streamsize>(grad.size() * sizeof(float)));
    out.close();
    if (!out) throw std::runtime_error("cannot write " + tmp);
  }
  fs::rename(tmp, path);
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

template <class Fn>
double median_seconds(int64_t repeats, Fn fn) {
  std::vector<double> t;
  for (int64_t r = 0; r < repeats; ++r) {
    const auto start = Clock::now();
    fn();
    t.push_back(std::chrono::duration<double>(Clock::now() - start).count());
  }
  return median(t);
}

struct Mode {
  const char* name;
  codec::CodecOptions opt;
  double max_rel_l2;  // verification bound
};

codec::CodecOptions make(codec::Codec c, bool shuffle, int level = 1) {
  codec::CodecOptions o;
  o.codec = c;
  o.shuffle = shuffle;
  o.zstd_level = level;
  return o;
}

}  // namespace

int main(int argc, char** argv) try {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // progress lines show up when piped
  const Options opt = parse(argc, argv);
  torch::manual_seed(0);
  const auto tok = tokenizer::load_gpt2_bpe(fs::path(opt.tokenizer_dir) / "encoder.json",
                                            fs::path(opt.tokenizer_dir) / "vocab.bpe");
  const std::vector<int32_t> ids = tok->encode(read_text(opt.text));
  const int64_t per_batch = opt.batch * opt.seq + 1;
  if (static_cast<int64_t>(ids.size()) < per_batch * (opt.warmup_steps + 1)) {
    throw std::runtime_error("not enough text for the batches");
  }
  std::printf("text: %s, %zu tokens; model %s, batch %lldx%lld, %lld AdamW steps before the "
              "measured gradients\n",
              opt.text.c_str(), ids.size(), opt.preset.c_str(), static_cast<long long>(opt.batch),
              static_cast<long long>(opt.seq), static_cast<long long>(opt.warmup_steps));

  auto m = model::make_model(model::ModelConfig::preset(opt.preset), 1234);
  torch::optim::AdamW adam(m->parameters(), torch::optim::AdamWOptions(3e-4).weight_decay(0.1));
  std::vector<float> grad;
  for (int64_t step = 0; step <= opt.warmup_steps; ++step) {
    const auto batch = torch::from_blob(const_cast<int32_t*>(ids.data()) + step * per_batch,
                                        {per_batch}, torch::kInt32).to(torch::kInt64);
    const auto x = batch.slice(0, 0, per_batch - 1).view({opt.batch, opt.seq});
    // Targets: the next token (the batch is one contiguous run of text).
    const auto y = batch.slice(0, 1, per_batch).view({opt.batch, opt.seq});
    adam.zero_grad();
    const auto start = Clock::now();
    const auto loss = model::language_model_loss(m->forward(x), y);
    loss.backward();
    std::printf("step %lld: loss %.4f, forward+backward %.1f s\n", static_cast<long long>(step),
                loss.item<double>(),
                std::chrono::duration<double>(Clock::now() - start).count());
    if (step < opt.warmup_steps) adam.step();
  }
  grad = flat_grads(*m);
  m.reset();
  const size_t n = grad.size();
  double norm = 0, amax = 0;
  for (float g : grad) {
    norm += static_cast<double>(g) * g;
    amax = std::max(amax, static_cast<double>(std::fabs(g)));
  }
  norm = std::sqrt(norm);
  std::printf("gradient: %zu elements (%.1f MB fp32), L2 %.4g, absmax %.4g\n\n", n, 4e-6 * n,
              norm, amax);
  if (!opt.dump.empty()) {
    dump_gradient(grad, opt.dump);
    std::printf("wrote %s (%zu elements, %zu bytes)\n", opt.dump.c_str(), n, 8 + 4 * n);
    return 0;
  }

  using codec::Codec;
  const std::vector<Mode> modes = {
      {"fp32 zstd1", make(Codec::fp32, false), 0},
      {"fp32 shuf zstd1", make(Codec::fp32, true), 0},
      {"fp32 shuf zstd-3", make(Codec::fp32, true, -3), 0},
      {"fp16 zstd1", make(Codec::fp16, false), 0x1p-11},
      {"fp16 shuf zstd1", make(Codec::fp16, true), 0x1p-11},
      {"fp16 shuf zstd3", make(Codec::fp16, true, 3), 0x1p-11},
      {"fp16 shuf zstd-1", make(Codec::fp16, true, -1), 0x1p-11},
      {"fp16 shuf zstd-5", make(Codec::fp16, true, -5), 0x1p-11},
      {"bf16 zstd1", make(Codec::bf16, false), 0x1p-8},
      {"bf16 shuf zstd1", make(Codec::bf16, true), 0x1p-8},
      {"bf16 shuf zstd3", make(Codec::bf16, true, 3), 0x1p-8},
      {"bf16 shuf zstd-1", make(Codec::bf16, true, -1), 0x1p-8},
      {"int8/256 zstd1", make(Codec::int8, false), 0.02},
      {"int8/256 zstd3", make(Codec::int8, false, 3), 0.02},
      {"int8/256 zstd-1", make(Codec::int8, false, -1), 0.02},
      {"int4/256 zstd1", make(Codec::int4, false), 0.3},
      {"int4/256 zstd3", make(Codec::int4, false, 3), 0.3},
      {"int4/256 zstd-1", make(Codec::int4, false, -1), 0.3},
  };
  const double gb = 4e-9 * static_cast<double>(n);
  std::vector<float> out(n), acc(n, 0.f);
  bool ok = true;
  std::printf("%-18s %7s %9s | %8s %8s %8s | %8s %8s %8s   (GB/s of fp32, median of %lld)\n",
              "mode", "ratio", "rel L2", "enc t1", "dec t1", "acc t1", "enc t2", "dec t2",
              "acc t2", static_cast<long long>(opt.repeats));
  for (Mode mode : modes) {
    double enc[2], dec[2], accum[2];
    std::string kept;  // the exchange encodes into a buffer it keeps across rounds: so does this
    for (int t = 0; t < 2; ++t) {
      mode.opt.threads = t + 1;
      enc[t] = gb / median_seconds(opt.repeats, [&] { codec::encode_into(grad.data(), n, mode.opt, kept); });
      const auto* payload = reinterpret_cast<const uint8_t*>(kept.data());
      dec[t] = gb / median_seconds(opt.repeats, [&] {
        codec::decode(payload, kept.size(), mode.opt, out.data(), n);
      });
      accum[t] = gb / median_seconds(opt.repeats, [&] {
        codec::decode_accumulate(payload, kept.size(), mode.opt, 0.5f, acc.data(), n);
      });
    }
    double err = 0;
    bool finite = true;
    for (size_t i = 0; i < n; ++i) {
      const double d = static_cast<double>(out[i]) - grad[i];
      err += d * d;
      finite = finite && std::isfinite(out[i]);
    }
    const double rel = std::sqrt(err) / norm;
    const bool exact = mode.max_rel_l2 > 0 || std::memcmp(out.data(), grad.data(), 4 * n) == 0;
    const bool good = finite && exact && rel <= std::max(mode.max_rel_l2, 0.0);
    ok = ok && good;
    std::printf("%-18s %6.2fx %9.2e | %8.2f %8.2f %8.2f | %8.2f %8.2f %8.2f %s\n", mode.name,
                4.0 * n / kept.size(), rel, enc[0], dec[0], accum[0], enc[1], dec[1], accum[1],
                good ? "" : "  FAILED VERIFICATION");
  }
  return ok ? 0 : 1;
} catch (const std::exception& e) {
  std::fprintf(stderr, "codec_bench: %s\n", e.what());
  return 2;
}
