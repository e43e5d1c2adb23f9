"""The embedding store's C++ tests (custom_ops/embedding/tests/, GoogleTest).

Once under AddressSanitizer + UndefinedBehaviorSanitizer (every case), once
under ThreadSanitizer (the threaded lookup/update case). The Makefile keeps
each variant's objects under build/cpp-test/<variant>/.
"""


def test_store_asan_ubsan(cpp_test_program, tmp_path):
    cpp_test_program("embedding_tests", "asan")(
        env={"ASAN_OPTIONS": "detect_leaks=1:abort_on_error=1", "TEST_TMPDIR": str(tmp_path)})


def test_store_threads_tsan(cpp_test_program, tmp_path):
    cpp_test_program("embedding_tests", "tsan")(
        "--gtest_filter=Threads.*", env={"TSAN_OPTIONS": "halt_on_error=1", "TEST_TMPDIR": str(tmp_path)})
