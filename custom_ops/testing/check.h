// The C++ tests' checks, as GoogleTest expectations (link with -lgtest
// -lgtest_main; run one case with --gtest_filter=Suite.Case):
//   CHECK(cond) / CHECK(cond, message)  a failure is reported (with the
//                                       message) and the case goes on;
//   CHECK_OK(expr)                      expr's Status must be ok; otherwise the
//                                       program stops: what follows would use
//                                       what failed to be made;
//   CHECK_CONTAINS(text, part)          part must occur in text.
#ifndef TFX_CUSTOM_OPS_TESTING_CHECK_H_
#define TFX_CUSTOM_OPS_TESTING_CHECK_H_

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <string>

namespace tfx::testing {

inline std::string What() { return std::string(); }
inline std::string What(const std::string& message) { return message; }

inline ::testing::AssertionResult Contains(const char*, const char* part_expr, const std::string& text,
                                           const std::string& part) {
  if (text.find(part) != std::string::npos) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "expected '" << part << "' (" << part_expr << ") in: " << text;
}

[[noreturn]] inline void Stop() {
  std::fflush(stdout);
  std::fflush(stderr);
  std::abort();
}

}  // namespace tfx::testing

#define CHECK(cond, ...)                                                                   \
  do {                                                                                     \
    if (!(cond)) ADD_FAILURE() << "CHECK(" #cond ") failed: " << ::tfx::testing::What(__VA_ARGS__); \
  } while (0)

#define CHECK_OK(expr)                                                                      \
  do {                                                                                      \
    const auto _tfx_status = (expr);                                                        \
    if (!_tfx_status.ok()) {                                                                \
      ADD_FAILURE() << #expr << ": " << _tfx_status.message();                              \
      ::tfx::testing::Stop();                                                               \
    }                                                                                       \
  } while (0)

#define CHECK_CONTAINS(text, part) EXPECT_PRED_FORMAT2(::tfx::testing::Contains, text, part)

#endif  // TFX_CUSTOM_OPS_TESTING_CHECK_H_
