// What signing costs next to what the codec costs (a benchmark, not a test; run by hand):
//
//   file_mac_bench [elements, default 2^25] [repeats, default 5]
//
// A gradient-like fp32 vector (Gaussian, scale 1e-3) is encoded fp16 + byte planes + zstd -1
// on one thread, as a contribution is; then that payload is framed unsigned and signed (the MAC
// of Note [Signed files] and the writer's signature of Note [Member signatures]), and parsed with
// and without the key. A small file (a heartbeat) shows signing's fixed cost per file. Prints the medians over the repeats in
// GB/s of the bytes each step handles, and the ratio of signing's extra time to encoding's.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "codec/codec.h"
#include "common/checksum.h"
#include "wire/envelope.h"

namespace {

using Clock = std::chrono::steady_clock;

template <class F>
double median_seconds(int repeats, F&& f) {
  std::vector<double> times;
  for (int i = 0; i < repeats; ++i) {
    const auto start = Clock::now();
    f();
    times.push_back(std::chrono::duration<double>(Clock::now() - start).count());
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  using namespace gradbox;
  const size_t n = argc > 1 ? std::stoull(argv[1]) : size_t{1} << 25;
  const int repeats = argc > 2 ? std::stoi(argv[2]) : 5;
  std::vector<float> gradient(n);
  std::mt19937 rng(1);
  std::normal_distribution<float> normal(0.f, 1e-3f);
  for (float& g : gradient) g = normal(rng);

  codec::CodecOptions options = codec::default_options(codec::Codec::fp16);
  options.threads = 1;
  std::string payload;
  const double encode_s = median_seconds(repeats, [&] { codec::encode_into(gradient.data(), n, options, payload); });

  const wire::FileMac mac(wire::RunSecret::generate());
  const std::string rel = "rounds/r00000001/g-a-s0-0123456789abcdef.gbx";
  wire::FileHeader header;
  header.set_run_id("bench");
  header.mutable_gradient()->set_round(1);
  std::string framed;
  const double frame_s = median_seconds(repeats, [&] { wire::frame_into(header, payload, framed); });
  const double frame_signed_s =
      median_seconds(repeats, [&] { wire::frame_into(header, payload, framed, wire::FileKey{&mac, rel}); });
  const double parse_s = median_seconds(repeats, [&] { (void)wire::parse_view(framed, "bench"); });
  const double parse_signed_s =
      median_seconds(repeats, [&] { (void)wire::parse_view(framed, "bench", wire::FileKey{&mac, rel}); });
  const double tag_s = median_seconds(repeats, [&] { (void)mac.tag("bench", rel, std::string(16, 'n'), payload); });
  const double sha_s = median_seconds(repeats, [&] { (void)wire::sha256(payload); });
  const double digest_s = median_seconds(repeats, [&] { (void)wire::file_digest(payload); });
  wire::FileHeader beat;
  beat.set_run_id("bench");
  beat.mutable_heartbeat()->set_worker("a");
  std::string small;
  const int small_files = 2000;
  const double small_signed_s = median_seconds(repeats, [&] {
    for (int i = 0; i < small_files; ++i) {
      wire::frame_into(beat, "", small, wire::FileKey{&mac, rel});
      (void)wire::parse_view(small, "bench", wire::FileKey{&mac, rel});
    }
  }) / small_files;
  const double small_s = median_seconds(repeats, [&] {
    for (int i = 0; i < small_files; ++i) {
      wire::frame_into(beat, "", small);
      (void)wire::parse_view(small, "bench");
    }
  }) / small_files;

  const double fp32_gb = 4e-9 * static_cast<double>(n);
  const double payload_gb = 1e-9 * static_cast<double>(payload.size());
  std::printf("gradient %zu fp32 (%.1f MB) -> fp16 payload %.1f MB; medians of %d, one thread\n", n, fp32_gb * 1e3,
              payload_gb * 1e3, repeats);
  std::printf("%-34s %9.3f s %8.2f GB/s of fp32\n", "encode fp16+shuffle+zstd", encode_s, fp32_gb / encode_s);
  std::printf("%-34s %9.3f s %8.2f GB/s of payload\n", "Poly1305 tag alone", tag_s, payload_gb / tag_s);
  std::printf("%-34s %9.3f s %8.2f GB/s of payload\n", "SHA-256 alone, one thread", sha_s, payload_gb / sha_s);
  std::printf("%-34s %9.3f s %8.2f GB/s of payload (%u threads)\n", "file digest (4 MiB pieces)", digest_s,
              payload_gb / digest_s, std::thread::hardware_concurrency());
  std::printf("%-34s %9.3f s %8.2f GB/s of payload\n", "frame, unsigned (XXH3)", frame_s, payload_gb / frame_s);
  std::printf("%-34s %9.3f s %8.2f GB/s of payload\n", "frame, signed", frame_signed_s, payload_gb / frame_signed_s);
  std::printf("%-34s %9.3f s %8.2f GB/s of payload\n", "parse, unsigned", parse_s, payload_gb / parse_s);
  std::printf("%-34s %9.3f s %8.2f GB/s of payload\n", "parse, signed (tag checked)", parse_signed_s,
              payload_gb / parse_signed_s);
  std::printf("%-34s %9.1f us, unsigned %.1f us\n", "a heartbeat signed, then checked", small_signed_s * 1e6,
              small_s * 1e6);
  std::printf("signing adds %.1f%% to encode+frame, checking adds %.1f%% to parse+decode-free read\n",
              100.0 * (frame_signed_s - frame_s) / (encode_s + frame_s), 100.0 * (parse_signed_s - parse_s) / parse_s);
  return 0;
}
