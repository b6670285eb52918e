#pragma once
// The data tests' check of a DataError: it names the file, and its message is "<file>: <problem>".
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <string>

#include "data/dataset.hpp"

namespace divsim::test {

// Runs f, expects a DataError naming `file` whose problem contains `needle`; returns the problem ("" when
// f threw none), for callers that check it whole.
inline std::string expect_data_error(const std::function<void()>& f, const std::string& file, const std::string& needle) {
  try {
    f();
    ADD_FAILURE() << "no DataError (expected one naming " << file << " with '" << needle << "')";
  } catch (const DataError& e) {
    const std::string what = e.what();
    EXPECT_EQ(e.file(), file) << what;
    EXPECT_EQ(what.rfind(file + ": ", 0), 0u) << what;
    EXPECT_NE(what.find(needle), std::string::npos) << what;
    return what.substr(std::min(what.size(), file.size() + 2));
  }
  return "";
}

}  // namespace divsim::test
