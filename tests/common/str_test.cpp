// str() appends text and integers directly and leaves everything else to operator<<: either
// way, the result must be what a std::ostringstream gives.
#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <limits>
#include <sstream>
#include <string>
#include <string_view>

#include "common/error.h"

namespace gradbox {
namespace {

template <class... Args>
std::string streamed(const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}

TEST(Str, TextAndIntegersAsAStreamWritesThem) {
  const std::string s = "round";
  const std::string_view v = "-shard";
  const char* c = "/g-";
  EXPECT_EQ(str(s, v, c, '_', 0, -1), streamed(s, v, c, '_', 0, -1));
  EXPECT_EQ(str(std::numeric_limits<int64_t>::min(), " ", std::numeric_limits<uint64_t>::max()),
            streamed(std::numeric_limits<int64_t>::min(), " ", std::numeric_limits<uint64_t>::max()));
  EXPECT_EQ(str(static_cast<short>(-7), static_cast<unsigned>(42), 5ul), "-7425");
  EXPECT_EQ(str(), "");
  EXPECT_EQ(str("rounds/r", 12, "/agreement"), "rounds/r12/agreement");
}

TEST(Str, EverythingElseGoesThroughTheStream) {
  const std::filesystem::path p = "a b/c";
  EXPECT_EQ(str("at ", p), streamed("at ", p));  // quoted, as operator<< quotes paths
  EXPECT_EQ(str(1.5, " ", 0.1, " ", 1e300), streamed(1.5, " ", 0.1, " ", 1e300));
  EXPECT_EQ(str(true, false), streamed(true, false));
  EXPECT_EQ(str(static_cast<unsigned char>('A'), static_cast<signed char>('b')),
            streamed(static_cast<unsigned char>('A'), static_cast<signed char>('b')));
  EXPECT_EQ(str("x=", 3, " y=", 2.25), "x=3 y=2.25");
}

}  // namespace
}  // namespace gradbox
