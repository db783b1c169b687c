// Writes the first inputs of every fuzz target (Note [Fuzzing] in fuzz_target.h): files as
// gradbox writes them, so that the fuzzer starts from inputs that reach deep into each decoder.
//   fuzz_seeds OUT_DIR       OUT_DIR/<target>/seed-*
#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "codec/codec.h"
#include "common/error.h"
#include "exchange/folder_checkpoint.h"
#include "exchange/live_control.h"
#include "exchange/round_agreement.h"
#include "model/config.h"
#include "wire/envelope.h"

namespace fs = std::filesystem;
using namespace gradbox;

namespace {

void put(const fs::path& dir, const std::string& name, const std::string& bytes) {
  fs::create_directories(dir);
  std::ofstream(dir / ("seed-" + name), std::ios::binary) << bytes;
}

std::vector<float> gradient(size_t n) {
  std::vector<float> g(n);
  for (size_t i = 0; i < n; ++i) g[i] = 1e-3f * std::sin(0.37f * static_cast<float>(i));
  return g;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: fuzz_seeds OUT_DIR\n");
    return 2;
  }
  const fs::path out = argv[1];
  const wire::FileMac mac(wire::RunSecret::from_text("the fuzzing run's secret", "fuzz"));
  const std::vector<float> g = gradient(300);

  // Codec payloads: byte 0 the codec (bit 7: byte planes), bytes 1-2 the element count.
  for (int c = 0; c < 5; ++c)
    for (bool shuffle : {false, true}) {
      codec::CodecOptions o = codec::default_options(static_cast<codec::Codec>(c));
      o.shuffle = shuffle;
      std::string payload;
      codec::encode_into(g.data(), g.size(), o, payload);
      const std::string prefix{static_cast<char>(c | (shuffle ? 0x80 : 0)), static_cast<char>(g.size() >> 8),
                               static_cast<char>(g.size() & 0xff)};
      put(out / "codec", str(codec::codec_name(o.codec), shuffle ? "-planes" : ""), prefix + payload);
    }

  // Shared-folder files: a contribution (signed and not), an agreement, a heartbeat, a run config.
  wire::FileHeader h;
  h.set_run_id("run");
  h.set_model_fingerprint(42);
  wire::GradientShard* shard = h.mutable_gradient();
  shard->set_round(1);
  shard->set_worker("a");
  shard->set_shard_count(1);
  shard->set_end(g.size());
  shard->set_tokens(512);
  *shard->mutable_codec() = exchange::codec_spec(codec::default_options(codec::Codec::fp16));
  std::string payload;
  codec::encode_into(g.data(), g.size(), codec::default_options(codec::Codec::fp16), payload);
  put(out / "envelope", "gradient", wire::frame(h, payload));
  put(out / "envelope", "gradient-signed",
      wire::frame(h, payload, wire::FileKey{&mac, "rounds/r00000001/g-a-s0-0123456789abcdef.gbx"}));
  wire::FileHeader commit;
  commit.set_run_id("run");
  commit.set_model_fingerprint(42);
  wire::Contribution* c = commit.mutable_commit()->add_contributors();
  c->set_worker("a");
  c->set_tokens(512);
  commit.mutable_commit()->mutable_view()->add_members("a");
  wire::Refusal* r = commit.mutable_commit()->add_refused();
  r->set_worker("b");
  r->set_reason("NaN");
  put(out / "envelope", "commit", wire::frame(commit, ""));
  wire::FileHeader hb;
  hb.set_run_id("run");
  hb.mutable_heartbeat()->set_worker("a");
  hb.mutable_heartbeat()->set_state("live");
  put(out / "envelope", "heartbeat", wire::frame(hb, ""));
  wire::FileHeader config;
  config.set_run_id("run");
  config.mutable_run_config()->set_sync("gradient");
  config.mutable_run_config()->set_model_config_json(model::ModelConfig::preset("gpt2-tiny").to_json().dump());
  put(out / "envelope", "run-config", wire::frame(config, ""));

  // A checkpoint manifest of two parts.
  wire::FileHeader manifest;
  manifest.set_run_id("run");
  manifest.set_model_fingerprint(42);
  wire::CheckpointManifest* m = manifest.mutable_checkpoint_manifest();
  m->set_step(1);
  m->set_publisher("a");
  wire::CheckpointFile* f = m->add_files();
  f->set_name("model.safetensors");
  f->set_bytes(100);
  for (const char* name : {"part-0000.gbx", "part-0001.gbx"}) {
    wire::CheckpointPartRef* p = m->add_parts();
    p->set_name(name);
    p->set_payload_length(50);
  }
  put(out / "checkpoint_manifest", "manifest", wire::frame(manifest, ""));

  // control.json and model configs.
  put(out / "control_json", "all", R"({"micro_batch": 8, "grad_accum": 2, "lr_multiplier": 0.5, "weight_decay": 0.1, "dropout": 0.1})");
  put(out / "control_json", "one", R"({"lr_multiplier": 2})");
  for (const std::string& name : model::ModelConfig::preset_names())
    put(out / "model_config", name, model::ModelConfig::preset(name).to_json().dump());

  // safetensors files as save_safetensors lays them out (8-byte length, padded JSON, data).
  auto safetensors = [](std::string header, size_t data_bytes) {
    header.append((8 - header.size() % 8) % 8, ' ');
    std::string file(8, '\0');
    for (int i = 0; i < 8; ++i) file[i] = static_cast<char>((uint64_t{header.size()} >> (8 * i)) & 0xff);
    return file + header + std::string(data_bytes, '\x01');
  };
  put(out / "safetensors", "model",
      safetensors(R"({"__metadata__":{"format":"gradbox"},"wte":{"dtype":"F32","shape":[4,2],"data_offsets":[0,32]},)"
                  R"("ln":{"dtype":"BF16","shape":[2],"data_offsets":[32,36]},"e":{"dtype":"I64","shape":[0],"data_offsets":[36,36]}})",
                  36));
  put(out / "safetensors", "optimizer",
      safetensors(R"({"m":{"dtype":"F16","shape":[3],"data_offsets":[0,6]},"q":{"dtype":"U8","shape":[2,1],"data_offsets":[6,8]},)"
                  R"("rng.cpu":{"dtype":"U8","shape":[5],"data_offsets":[8,13]},"b":{"dtype":"BOOL","shape":[1],"data_offsets":[13,14]}})",
                  14));

  // A small GPT-2 tokenizer: encoder.json NUL vocab.bpe.
  std::string encoder = "{";
  for (int b = 33; b < 127; ++b) {
    if (b == '"' || b == '\\') continue;
    encoder += str("\"", static_cast<char>(b), "\": ", b - 33, ", ");
  }
  encoder += "\"he\": 200, \"ll\": 201, \"<|endoftext|>\": 202}";
  put(out / "gpt2_tokenizer", "small", encoder + std::string(1, '\0') + "#version: 0.2\nh e\nl l\n");
  return 0;
}
