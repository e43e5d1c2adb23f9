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

# The C++ tests (GoogleTest, no TensorFlow): each program of libraries.bzl's
# CPP_TESTS is its tests plus the code under test, the lists read from that one
# declaration through build_ops.py. Objects are shared between programs, so each
# source is compiled once per variant: opt (-O2), and the sanitizer variants a
# program declares (build/cpp-test/asan/..., build/cpp-test/tsan/...). One case
# alone: build/cpp-test/opt/comm_tests --gtest_filter=Coordinator.OnItsOwn.
# tests/comm/test_cpp_runtime.py, test_service_native.py and
# tests/embedding/test_store_cpp.py build and run these targets under pytest.
CPP_TEST_DIR := build/cpp-test
CPP_TESTS := $(shell $(PYTHON) build_ops.py --tests)
CPP_COPTS := $(shell $(PYTHON) build_ops.py --copts) -I.
CPP_HEADERS := $(shell find custom_ops -name '*.h' -o -name '*.inc')
CPP_VARIANTS := opt asan tsan
CPP_FLAGS_opt := -O2
CPP_FLAGS_asan := -O1 -g -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer
CPP_FLAGS_tsan := -O1 -g -fsanitize=thread -fno-omit-frame-pointer
CPP_LIBS := -lgtest -lgtest_main -lrt -lcrypto

define cpp_variant
$(CPP_TEST_DIR)/$(1)/%.o: %.cc $(CPP_HEADERS)
	@mkdir -p $$(dir $$@)
	$$(CXX) $(CPP_COPTS) $(CPP_FLAGS_$(1)) -c $$< -o $$@
endef
$(foreach v,$(CPP_VARIANTS),$(eval $(call cpp_variant,$(v))))

define cpp_program
$(CPP_TEST_DIR)/$(2)/$(1): $(patsubst %.cc,$(CPP_TEST_DIR)/$(2)/%.o,$(CPP_SRCS_$(1)))
	$$(CXX) $(CPP_FLAGS_$(2)) -pthread $$^ -o $$@ $(CPP_LIBS)
endef
$(foreach t,$(CPP_TESTS),$(eval CPP_SRCS_$(t) := $(shell $(PYTHON) build_ops.py --sources $(t))))
$(foreach t,$(CPP_TESTS),$(foreach v,$(CPP_VARIANTS),$(eval $(call cpp_program,$(t),$(v)))))

cpp-test: $(CPP_TESTS:%=$(CPP_TEST_DIR)/opt/%)
	@for t in $^; do echo "== $$t"; $$t --gtest_brief=1 || exit 1; done

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

# TensorFlow minors other than the system's (docs/compatibility.md): `make compat TF=2.19` runs the
# smoke set (pytest -m smoke) in a venv of that minor with the ops built against it; SET=full runs
# the whole suite. Venvs go to build/compat/venvs unless TFX_COMPAT_VENVS says where.
TF ?= 2.21
SET ?= smoke
.PHONY: compat wheels tf-nightly
compat:
	bash scripts/compat.sh $(TF) $(SET)

# One binary wheel per supported TensorFlow minor into dist/, each checked in a fresh venv with no
# compiler on the PATH (the smoke set against the installed wheel).
wheels:
	bash scripts/wheels.sh

# The early warning: the smoke set against the newest tf-nightly, what breaks written to
# build/compat/tfnightly/report.md (never gates CI).
tf-nightly:
	bash scripts/nightly_report.sh

# tfx_dist under Ray Train (tests/ray): a local Ray cluster of three `ray start` nodes and
# five Ray jobs, several minutes, so not part of `make test`. Installs Ray first.
.PHONY: ray
ray:
	$(PYTHON) -m pip install "ray[default,train]==2.60.0"
	TFX_RAY_TESTS=1 $(PYTHON) -m pytest tests/ray -q --durations=10
