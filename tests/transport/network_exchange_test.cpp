// The network transport with real processes: three workers over Gloo on the loopback interface
// and a c10d FileStore in a temporary folder. Each worker writes what every round gave it; the
// test compares the workers with each other (identical bytes) and with the folder transport's
// arithmetic (TokenWeightedSum), then kills one with SIGKILL at chosen moments of a round.
#include "transport/network_exchange.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <fstream>
#include <algorithm>
#include <map>
#include <random>
#include <thread>

#include "exchange/token_weighted_sum.h"

namespace gradbox::transport {
namespace {

namespace fs = std::filesystem;

constexpr size_t kElements = 2500;  // three buckets of 1000
constexpr uint64_t kRounds = 6;
const std::vector<std::string> kWorkers{"a", "b", "c"};
const std::map<std::string, uint64_t> kTokens{{"a", 100}, {"b", 300}, {"c", 50}};  // unequal on purpose

std::vector<float> gradient(const std::string& worker, uint64_t round) {
  std::vector<float> g(kElements);
  const double k = 0.01 * (worker[0] - 'a' + 1);
  for (size_t i = 0; i < kElements; ++i) g[i] = static_cast<float>(std::sin(k * i + round) * (1 + worker[0] - 'a'));
  return g;
}

struct Kill {
  std::string worker;
  uint64_t round = 0;
  std::string stage;
  int signal = SIGKILL;  // SIGSTOP: the worker hangs (the test kills it once the others are done)
};

fs::path result_path(const fs::path& dir, const std::string& worker, uint64_t round) {
  return dir / (worker + "-r" + std::to_string(round) + ".bin");
}

// The precision on the wire of the next cluster (set before it forks).
WireDtype g_wire = WireDtype::fp32;
// Which workers stream their rounds (begin_streamed_round, as a per-step trainer does), and
// which all_reduce them whole.
std::vector<std::string> g_streaming;

// A streamed round as backward makes it: ten parts, last first; each part's values appear in
// the buffer only when the part is reported (NaN until then, so a bucket read early poisons the
// round), times a loss scale of 4 that the round undoes. Each worker reports its parts in its
// own order: a in the expected one, b reversed, c shuffled per round. The `kill` stage
// "backward" kills after half the parts.
exchange::RoundResult streamed_round(NetworkExchange& exchange, const std::string& worker, uint64_t round,
                                     std::vector<float>& g, const Kill& kill) {
  const std::vector<float> truth = gradient(worker, round);
  std::vector<exchange::Span> parts;
  for (size_t end = kElements; end > 0; end -= kElements / 10) parts.push_back({end - kElements / 10, end});
  g.assign(kElements, std::numeric_limits<float>::quiet_NaN());
  auto stream = exchange.begin_streamed_round(round, g.data(), g.size(), parts, {kTokens.at(worker), 2.0}, 0.25f);
  std::vector<size_t> order(parts.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  if (worker == "b") std::reverse(order.begin(), order.end());
  if (worker == "c") std::shuffle(order.begin(), order.end(), std::mt19937(static_cast<unsigned>(round)));
  for (size_t k = 0; k < order.size(); ++k) {
    const exchange::Span part = parts[order[k]];
    for (size_t i = part.begin; i < part.end; ++i) g[i] = truth[i] * 4.0f;
    stream->part_ready(order[k]);
    if (k == order.size() / 2 && worker == kill.worker && round == kill.round && kill.stage == "backward")
      ::raise(kill.signal);
  }
  return stream->finish();
}

bool streams_any(const std::string& worker) {
  return std::find(g_streaming.begin(), g_streaming.end(), worker) != g_streaming.end();
}

[[noreturn]] void run_worker(const fs::path& dir, const std::string& worker, const Kill& kill) {
  try {
    NetworkExchangeConfig c;
    c.run_id = "t";
    c.worker = worker;
    c.founders = kWorkers;
    c.store_path = dir / "store";
    c.interface = "lo";
    c.timeout_s = 6;
    c.regroup_window_s = 30;
    c.stale_after_s = 2;
    c.join_window_s = 60;
    c.bucket_floats = 1000;
    c.wire = g_wire;
    c.before_stage = [&](const char* stage, uint64_t round) {
      if (worker == kill.worker && round == kill.round && stage == kill.stage) ::raise(kill.signal);
    };
    NetworkExchange exchange(c, mirror::system_clock());
    exchange.join(dir, -1);
    // Gloo writes to a peer killed mid-round; SIGPIPE's default would end this worker silently
    // (Note [A broken pipe is an error, not a death]).
    struct sigaction pipe_action {};
    ::sigaction(SIGPIPE, nullptr, &pipe_action);
    if (pipe_action.sa_handler == SIG_DFL) throw std::runtime_error("a broken pipe would kill this worker");
    for (uint64_t round = 1; round <= kRounds; ++round) {
      std::vector<float> g = gradient(worker, round);
      const exchange::RoundResult r = streams_any(worker) ? streamed_round(exchange, worker, round, g, kill)
                                              : exchange.all_reduce(round, g.data(), g.size(), {kTokens.at(worker), 2.0});
      if (r.skip) throw std::runtime_error("round " + std::to_string(round) + " skipped: a non-finite input");
      std::ofstream out(result_path(dir, worker, round), std::ios::binary);
      const double meta[3] = {static_cast<double>(r.tokens), static_cast<double>(r.contributors), r.wait_seconds};
      out.write(reinterpret_cast<const char*>(meta), sizeof(meta));
      out.write(reinterpret_cast<const char*>(g.data()), static_cast<std::streamsize>(g.size() * sizeof(float)));
    }
    if (exchange.stats().rounds_streamed != (streams_any(worker) ? kRounds : 0) && kill.worker.empty())
      throw std::runtime_error("streamed " + std::to_string(exchange.stats().rounds_streamed) + " rounds");
    exchange.leave();
    ::_exit(0);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "worker %s: %s\n", worker.c_str(), e.what());
    std::ofstream(dir / (worker + ".error")) << e.what();
    ::_exit(1);
  }
}

struct Result {
  double tokens = 0, contributors = 0, wait_seconds = 0;
  std::vector<float> average;
};

Result read_result(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in) << path;
  Result r;
  double meta[3] = {};
  in.read(reinterpret_cast<char*>(meta), sizeof(meta));
  r.tokens = meta[0];
  r.contributors = meta[1];
  r.wait_seconds = meta[2];
  r.average.resize(kElements);
  in.read(reinterpret_cast<char*>(r.average.data()), static_cast<std::streamsize>(kElements * sizeof(float)));
  return r;
}

// The folder transport's average of the given workers' round (gradient_exchange.h's weights,
// summed in worker order), and the bound on how far another summation order may land from it.
std::pair<std::vector<float>, std::vector<float>> folder_average(const std::vector<std::string>& workers,
                                                                 uint64_t round) {
  exchange::TokenWeightedSum sum;
  std::vector<std::vector<float>> grads;
  for (const std::string& w : workers) grads.push_back(gradient(w, round));
  for (size_t i = 0; i < workers.size(); ++i)
    sum.add(workers[i], kTokens.at(workers[i]), exchange::TokenWeightedSum::floats(grads[i].data()));
  std::vector<float> average(kElements), bound(kElements, 0.0f);
  sum.sum_into(average.data(), kElements);
  // N terms summed in two orders differ by at most 2 (N - 1) eps sum|w_i g_i|.
  const double eps = std::ldexp(1.0, -24);
  for (size_t i = 0; i < workers.size(); ++i) {
    const float w = exchange::contribution_weight(kTokens.at(workers[i]), sum.total_tokens());
    for (size_t j = 0; j < kElements; ++j)
      bound[j] += static_cast<float>(2.0 * (workers.size() - 1) * eps * std::abs(w * grads[i][j]));
  }
  return {average, bound};
}

// Runs the three workers (one is killed as `kill` says) and returns each one's exit status.
std::map<std::string, int> run_cluster(const fs::path& dir, const Kill& kill) {
  std::map<std::string, pid_t> pids;
  for (const std::string& w : kWorkers) {
    const pid_t pid = ::fork();
    if (pid == 0) run_worker(dir, w, kill);
    pids[w] = pid;
  }
  std::map<std::string, int> status;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  for (auto& [w, pid] : pids) {
    int s = 0;
    if (w == kill.worker && kill.signal == SIGSTOP) continue;
    while (::waitpid(pid, &s, WNOHANG) == 0) {
      if (std::chrono::steady_clock::now() > deadline) {
        ::kill(pid, SIGKILL);
        ::waitpid(pid, &s, 0);
        ADD_FAILURE() << "worker " << w << " hung";
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    status[w] = s;
  }
  if (kill.signal == SIGSTOP) {  // the others are done: end the hung one
    ::kill(pids[kill.worker], SIGKILL);
    ::waitpid(pids[kill.worker], &status[kill.worker], 0);
  }
  return status;
}

class NetworkExchangeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("gradbox-c10d-" + std::to_string(::getpid()) + "-" + ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }

  void TearDown() override {
    g_wire = WireDtype::fp32;
    g_streaming.clear();
    fs::remove_all(dir_);
  }

  // bound_scale: how many times the fp32 reordering bound an element may be off (fp16 on the
  // wire rounds each contribution and each partial sum to 11 bits).
  void expect_round(uint64_t round, const std::vector<std::string>& alive, const std::vector<std::string>& contributors,
                    double bound_scale = 1) {
    SCOPED_TRACE("round " + std::to_string(round));
    auto [expected, bound] = folder_average(contributors, round);
    for (float& b : bound) b = static_cast<float>(b * bound_scale);
    uint64_t tokens = 0;
    for (const std::string& w : contributors) tokens += kTokens.at(w);
    const Result first = read_result(result_path(dir_, alive.front(), round));
    EXPECT_EQ(first.tokens, static_cast<double>(tokens));
    EXPECT_EQ(first.contributors, static_cast<double>(contributors.size()));
    size_t outside = 0;
    for (size_t j = 0; j < kElements; ++j) outside += std::abs(first.average[j] - expected[j]) > bound[j];
    EXPECT_EQ(outside, 0u) << "elements farther from the folder's average than the rounding bound";
    for (const std::string& w : alive) {
      const Result r = read_result(result_path(dir_, w, round));
      EXPECT_EQ(std::memcmp(r.average.data(), first.average.data(), kElements * sizeof(float)), 0)
          << w << " and " << alive.front() << " differ";
    }
  }

  fs::path dir_;
};

TEST_F(NetworkExchangeTest, ThreeWorkersGetIdenticalBytesThatMatchTheFolderAverage) {
  const auto status = run_cluster(dir_, {});
  for (const auto& [w, s] : status) EXPECT_TRUE(WIFEXITED(s) && WEXITSTATUS(s) == 0) << w;
  for (uint64_t round = 1; round <= kRounds; ++round) expect_round(round, kWorkers, kWorkers);
}

TEST_F(NetworkExchangeTest, Fp16OnTheWireGivesIdenticalBytesWithinFp16RoundingOfTheAverage) {
  g_wire = WireDtype::fp16;
  const auto status = run_cluster(dir_, {});
  for (const auto& [w, s] : status) EXPECT_TRUE(WIFEXITED(s) && WEXITSTATUS(s) == 0) << w;
  // fp32's bound is 2 (N-1) 2^-24 sum|w g|; fp16 rounds at 2^-11, at most N + (N-1) times.
  for (uint64_t round = 1; round <= kRounds; ++round) expect_round(round, kWorkers, kWorkers, 1.25 * std::ldexp(1.0, 13));
  // And it was fp16: most elements are farther from the average than fp32 could be.
  const auto [expected, bound] = folder_average(kWorkers, 1);
  const Result r = read_result(result_path(dir_, "a", 1));
  size_t outside_fp32 = 0;
  for (size_t j = 0; j < kElements; ++j) outside_fp32 += std::abs(r.average[j] - expected[j]) > bound[j];
  EXPECT_GT(outside_fp32, kElements / 2);
}

TEST_F(NetworkExchangeTest, AWorkerKilledBeforeItSendsIsLeftOutAndTheRoundIsRedone) {
  const auto status = run_cluster(dir_, {"c", 3, "data"});
  EXPECT_TRUE(WIFSIGNALED(status.at("c")) && WTERMSIG(status.at("c")) == SIGKILL);
  EXPECT_EQ(WEXITSTATUS(status.at("a")), 0);
  EXPECT_EQ(WEXITSTATUS(status.at("b")), 0);
  for (uint64_t round = 1; round <= 2; ++round) expect_round(round, {"a", "b"}, kWorkers);
  for (uint64_t round = 3; round <= kRounds; ++round) expect_round(round, {"a", "b"}, {"a", "b"});
  // The collective failed at once (closed sockets); the registrar did not wait out its 30 s
  // window for c, only c's heartbeat going stale (2 s).
  EXPECT_LT(read_result(result_path(dir_, "a", 3)).wait_seconds, 20.0);
}

TEST_F(NetworkExchangeTest, AWorkerKilledAfterTheDataKeepsItsContributionInThatRound) {
  const auto status = run_cluster(dir_, {"c", 3, "ack"});
  EXPECT_TRUE(WIFSIGNALED(status.at("c")));
  EXPECT_EQ(WEXITSTATUS(status.at("a")), 0);
  EXPECT_EQ(WEXITSTATUS(status.at("b")), 0);
  // Everyone had round 3's data when c died: it completes with c in it; c is gone from round 4.
  for (uint64_t round = 1; round <= 3; ++round) expect_round(round, {"a", "b"}, kWorkers);
  for (uint64_t round = 4; round <= kRounds; ++round) expect_round(round, {"a", "b"}, {"a", "b"});
}

TEST_F(NetworkExchangeTest, AWorkerHungBeforeARoundIsGivenUpWhenItsHeartbeatGoesStale) {
  // c stops (SIGSTOP) before it arrives at round 3: no socket closes, nothing fails; the others
  // wait at the round's arrival barrier until c's heartbeat is stale (2 s), then go on.
  const auto status = run_cluster(dir_, {"c", 3, "arrive", SIGSTOP});
  EXPECT_EQ(WEXITSTATUS(status.at("a")), 0);
  EXPECT_EQ(WEXITSTATUS(status.at("b")), 0);
  for (uint64_t round = 1; round <= 2; ++round) expect_round(round, {"a", "b"}, kWorkers);
  for (uint64_t round = 3; round <= kRounds; ++round) expect_round(round, {"a", "b"}, {"a", "b"});
  const double waited = read_result(result_path(dir_, "a", 3)).wait_seconds;
  EXPECT_GE(waited, 2.0);
  EXPECT_LT(waited, 6.0);  // the stale heartbeat, not --c10d-timeout (6 s) or the window (30 s)
}

TEST_F(NetworkExchangeTest, AWorkerHungInsideACollectiveIsGivenUpAfterTheTimeout) {
  // c stops after the barrier, inside round 3's collectives: Gloo's own timeout (6 s) ends them.
  const auto status = run_cluster(dir_, {"c", 3, "header", SIGSTOP});
  EXPECT_EQ(WEXITSTATUS(status.at("a")), 0);
  EXPECT_EQ(WEXITSTATUS(status.at("b")), 0);
  for (uint64_t round = 3; round <= kRounds; ++round) expect_round(round, {"a", "b"}, {"a", "b"});
  const double waited = read_result(result_path(dir_, "a", 3)).wait_seconds;
  EXPECT_GE(waited, 6.0);
  EXPECT_LT(waited, 12.0);
}

TEST_F(NetworkExchangeTest, TheFirstMemberDyingTakesNothingWithIt) {
  // a is rank 0 and the first registrar; the store lives in the folder, not in a.
  const auto status = run_cluster(dir_, {"a", 2, "header"});
  EXPECT_TRUE(WIFSIGNALED(status.at("a")));
  EXPECT_EQ(WEXITSTATUS(status.at("b")), 0);
  EXPECT_EQ(WEXITSTATUS(status.at("c")), 0);
  expect_round(1, {"b", "c"}, kWorkers);
  for (uint64_t round = 2; round <= kRounds; ++round) expect_round(round, {"b", "c"}, {"b", "c"});
}

TEST_F(NetworkExchangeTest, StreamedRoundsInAnyReadyOrderGiveIdenticalBytesThatMatchTheFolderAverage) {
  g_streaming = kWorkers;
  const auto status = run_cluster(dir_, {});
  for (const auto& [w, s] : status) EXPECT_TRUE(WIFEXITED(s) && WEXITSTATUS(s) == 0) << w;
  // The loss scale (4, a power of two) comes out exactly, so the fp32 bound holds as it is.
  for (uint64_t round = 1; round <= kRounds; ++round) expect_round(round, kWorkers, kWorkers);
}

TEST_F(NetworkExchangeTest, AWorkerKilledMidBackwardIsLeftOutAndTheOthersRedoTheRoundFromTheirKeptInput) {
  // c dies with half its parts reported (some of its buckets on the wire, the rest never): a and
  // b lack the round's data, so they redo it, unscaled, from what they kept.
  g_streaming = kWorkers;
  const auto status = run_cluster(dir_, {"c", 3, "backward"});
  EXPECT_TRUE(WIFSIGNALED(status.at("c")) && WTERMSIG(status.at("c")) == SIGKILL);
  EXPECT_EQ(WEXITSTATUS(status.at("a")), 0);
  EXPECT_EQ(WEXITSTATUS(status.at("b")), 0);
  for (uint64_t round = 1; round <= 2; ++round) expect_round(round, {"a", "b"}, kWorkers);
  for (uint64_t round = 3; round <= kRounds; ++round) expect_round(round, {"a", "b"}, {"a", "b"});
}

TEST_F(NetworkExchangeTest, AStreamedRoundWhoseAckFailsCompletesFromTheHeldData) {
  g_streaming = kWorkers;
  const auto status = run_cluster(dir_, {"c", 3, "ack"});
  EXPECT_TRUE(WIFSIGNALED(status.at("c")));
  EXPECT_EQ(WEXITSTATUS(status.at("a")), 0);
  EXPECT_EQ(WEXITSTATUS(status.at("b")), 0);
  for (uint64_t round = 1; round <= 3; ++round) expect_round(round, {"a", "b"}, kWorkers);
  for (uint64_t round = 4; round <= kRounds; ++round) expect_round(round, {"a", "b"}, {"a", "b"});
}

TEST_F(NetworkExchangeTest, MembersThatCutARoundDifferentlyAllStopWithAClearError) {
  // c sends its rounds whole while a and b stream them: their buckets differ, so summing them
  // would mix unrelated bytes. The header's plan fingerprints tell, and everyone stops.
  g_streaming = {"a", "b"};
  const auto status = run_cluster(dir_, {});
  for (const std::string& w : kWorkers) {
    EXPECT_TRUE(WIFEXITED(status.at(w)) && WEXITSTATUS(status.at(w)) == 1) << w;
    std::ifstream in(dir_ / (w + ".error"));
    const std::string error((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    EXPECT_NE(error.find("split round 1 into different buckets"), std::string::npos) << w << ": " << error;
  }
}

}  // namespace
}  // namespace gradbox::transport
