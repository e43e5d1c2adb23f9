# The two commands of the README, and the benchmark.
PYTHON ?= python3

.PHONY: setup demo test bench horovod gpu-check

setup:
	bash scripts/setup.sh

# A real 2-worker Keras training on this machine: two OS processes, our ring
# all-reduce between them over loopback.
demo: setup
	TF_CPP_MIN_LOG_LEVEL=2 $(PYTHON) -m tfx_dist.run -n 2 --timeout 900 $(PYTHON) examples/train_digits_multiworker.py

test: setup
	$(PYTHON) -m pytest tests -q

bench: setup
	$(PYTHON) benchmarks/run_all.py

# Horovod 0.28.1 (TensorFlow 2.12.1, Gloo) in build/horovod-venv: the Horovod
# column of the cross-process all-reduce benchmark (10-25 min to build).
horovod:
	bash benchmarks/setup_horovod.sh

# The GPU kernel of TfxFusedReduce on its own (nvcc and a GPU; no TensorFlow):
# bit-exact check against the host, then timings into benchmarks/results/.
gpu-check:
	bash scripts/gpu_check.sh
