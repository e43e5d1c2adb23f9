# The two commands of the README, and the benchmark.
PYTHON ?= python3

.PHONY: setup demo test cpp-test bench horovod gpu-check reliability reliability-long

setup:
	bash scripts/setup.sh

# A real 2-worker Keras training on this machine: two OS processes, our ring
# all-reduce between them over loopback.
demo: setup
	TF_CPP_MIN_LOG_LEVEL=2 $(PYTHON) -m tfx_dist.run -n 2 --timeout 900 $(PYTHON) examples/train_digits_multiworker.py

test: setup
	$(PYTHON) -m pytest tests -q --durations=40

# The collective runtime's own tests, in one process (no TensorFlow): N
# communicators over socketpairs, every collective x transport x 1..12 ranks,
# the coordinator and the messages. tests/comm/test_cpp_runtime.py runs this
# target, so `make test` runs it once, under pytest.
CPP_TEST_DIR := build/cpp-test
COMM_CORE_SRCS := $(shell find custom_ops/common custom_ops/comm/core -name '*.cc' ! -name '*_test.cc')
COMM_CORE_OBJS := $(COMM_CORE_SRCS:%.cc=$(CPP_TEST_DIR)/%.o)
COMM_TEST_OBJS := $(COMM_CORE_OBJS) $(CPP_TEST_DIR)/custom_ops/comm/tests/runtime_test.o
COMM_HEADERS := $(shell find custom_ops/common custom_ops/comm -name '*.h')

$(CPP_TEST_DIR)/%.o: %.cc $(COMM_HEADERS)
	@mkdir -p $(dir $@)
	$(CXX) -std=c++17 -O2 -pthread -Wall -Wno-sign-compare -I. -c $< -o $@

$(CPP_TEST_DIR)/runtime_test: $(COMM_TEST_OBJS)
	$(CXX) -pthread $^ -o $@ -lrt -lcrypto

# The service's in-process tests (custom_ops/comm/core/service/service_test.cc),
# linked with runtime_test's objects of the runtime, so that they are compiled
# once: tests/comm/test_service_native.py builds this target and runs it.
$(CPP_TEST_DIR)/service_test: $(COMM_CORE_OBJS) $(CPP_TEST_DIR)/custom_ops/comm/core/service/service_test.o
	$(CXX) -pthread $^ -o $@ -lrt -lcrypto

# The service's and the parameter server's decoders, fuzzed in process.
SERVICE_FUZZ_SRCS := $(shell find custom_ops/common custom_ops/comm/core custom_ops/embedding/core custom_ops/embedding/server -name '*.cc' ! -name '*_test.cc') custom_ops/comm/tests/service_fuzz_test.cc
SERVICE_FUZZ_OBJS := $(SERVICE_FUZZ_SRCS:%.cc=$(CPP_TEST_DIR)/%.o)
EMBEDDING_HEADERS := $(shell find custom_ops/embedding -name '*.h')

$(CPP_TEST_DIR)/custom_ops/embedding/%.o: custom_ops/embedding/%.cc $(COMM_HEADERS) $(EMBEDDING_HEADERS)
	@mkdir -p $(dir $@)
	$(CXX) -std=c++17 -O2 -pthread -Wall -Wno-sign-compare -I. -c $< -o $@

$(CPP_TEST_DIR)/service_fuzz_test: $(SERVICE_FUZZ_OBJS)
	$(CXX) -pthread $^ -o $@ -lrt -lcrypto

cpp-test: $(CPP_TEST_DIR)/runtime_test $(CPP_TEST_DIR)/service_fuzz_test
	$(CPP_TEST_DIR)/runtime_test
	$(CPP_TEST_DIR)/service_fuzz_test

# RELIABILITY.md: every fault, bad input and attack test (pytest -m reliability),
# the long ones too (soak, minutes of fuzzing; RELIABILITY_LONG=0 leaves them out).
RELIABILITY_LONG ?= 1
RELIABILITY_LOG := build/reliability.jsonl
reliability:
	@mkdir -p build && rm -f $(RELIABILITY_LOG)
	TFX_RELIABILITY_LONG=$(RELIABILITY_LONG) TFX_RELIABILITY_LOG=$(abspath $(RELIABILITY_LOG)) \
	  $(PYTHON) -m pytest tests -m reliability -q -p no:cacheprovider; rc=$$?; \
	  $(PYTHON) scripts/reliability_report.py $(RELIABILITY_LOG) RELIABILITY.md \
	    --long-ran $(RELIABILITY_LONG) --pytest-rc $$rc; exit $$rc

# Only the long runs (pytest -m long: soak, 4 workers on 2 cores, 2 GiB, minutes of
# fuzzing, 10,000-step memory runs), merged into the existing RELIABILITY.md:
# their rows replace the same tests' rows, the header says so.
RELIABILITY_LONG_LOG := build/reliability-long.jsonl
reliability-long:
	@mkdir -p build && rm -f $(RELIABILITY_LONG_LOG)
	TFX_RELIABILITY_LONG=1 TFX_RELIABILITY_LOG=$(abspath $(RELIABILITY_LONG_LOG)) \
	  $(PYTHON) -m pytest tests -m long -q -p no:cacheprovider; rc=$$?; \
	  $(PYTHON) scripts/reliability_report.py $(RELIABILITY_LONG_LOG) RELIABILITY.md \
	    --merge "the long runs (\`make reliability-long\`: \`pytest -m long\` with TFX_RELIABILITY_LONG=1)" \
	    --pytest-rc $$rc; exit $$rc

bench: setup
	$(PYTHON) benchmarks/run_all.py

# Horovod 0.28.1 (TensorFlow 2.12.1, Gloo) in build/horovod-venv: the Horovod
# column of the cross-process all-reduce benchmark (10-25 min to build).
horovod:
	bash benchmarks/setup_horovod.sh

# The CUDA kernels on their own (nvcc and a GPU; no TensorFlow): TfxFusedReduce's
# and the embedding store's, bit-exact checks against the host (the embedding
# one also under compute-sanitizer), then timings into benchmarks/results/.
gpu-check:
	bash scripts/gpu_check.sh
