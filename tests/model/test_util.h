#pragma once
// Small helpers shared by the model tests.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include "common/error.h"

namespace gradbox::model::testing {

// A fresh, empty folder under the system temp dir, unique to this process and test.
inline std::filesystem::path fresh_dir(const std::string& name) {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  std::filesystem::path dir = std::filesystem::temp_directory_path() /
                              gradbox::str("gradbox_model_", info ? info->name() : "x", "_", name,
                                           "_", ::getpid());
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

// Runs `fn`, expects an InputError whose message contains every one of `needles`.
template <class Fn, class... Needles>
void expect_input_error(Fn&& fn, const Needles&... needles) {
  try {
    fn();
    ADD_FAILURE() << "expected an InputError";
  } catch (const InputError& e) {
    const std::string what = e.what();
    for (const std::string& needle : {std::string(needles)...}) {
      EXPECT_NE(what.find(needle), std::string::npos) << "'" << needle << "' not in: " << what;
    }
  }
}

}  // namespace gradbox::model::testing
