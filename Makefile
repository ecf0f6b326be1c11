# `make` sets up and builds the command line, `make run` runs the main job, `make test` builds
# everything (the suite, the emulated CUDA device, the CUDA backend when nvcc is there) and runs it.
BUILD ?= build
JOBS ?= $(shell nproc)
# The OpenBLAS kernel set is pinned (as in CI) so that results do not depend on the host CPU.
export OPENBLAS_CORETYPE ?= Haswell

PACKAGES := cmake g++ make libopenblas-dev libboost-program-options-dev catch2 nlohmann-json3-dev libstb-dev fonts-dejavu-core libopenmpi-dev openmpi-bin ccache
# What only `make test` installs besides: the browser of the attention viewer's test
# (tests/plot/attention_viewer_browser.py; it skips with a message where chromium is missing).
TEST_PACKAGES := chromium
SETUP_PACKAGES = $(PACKAGES)
test test-build: SETUP_PACKAGES = $(PACKAGES) $(TEST_PACKAGES)

# The CUDA backend. `make run` and `make` leave it to CMake's default (TAPEGRAD_CUDA=AUTO: built
# when nvcc is there and a GPU is visible), unless told: `make run TAPEGRAD_CUDA=ON` (or OFF).
# `make test` builds it whenever nvcc is there, so that the suite proves it compiles and links
# (its kernels run on the emulated device either way).
NVCC := $(or $(shell command -v nvcc 2>/dev/null),$(wildcard /usr/local/cuda/bin/nvcc))
TEST_CUDA := $(or $(TAPEGRAD_CUDA),$(if $(NVCC),ON,OFF))
CUDA_FLAG := $(if $(TAPEGRAD_CUDA),-DTAPEGRAD_CUDA=$(TAPEGRAD_CUDA))

.PHONY: all setup configure build run test-build test clean

all: build

# Installs only the system packages that are missing (`make test`: TEST_PACKAGES too).
setup:
	@missing=""; for p in $(SETUP_PACKAGES); do \
	  dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q "ok installed" || missing="$$missing $$p"; \
	done; \
	if [ -n "$$missing" ]; then \
	  echo "installing:$$missing"; \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq $$missing; \
	fi

# Configures once; again whenever TAPEGRAD_CUDA is given.
configure: setup
	@if [ ! -f $(BUILD)/CMakeCache.txt ] || [ -n "$(CUDA_FLAG)" ]; then \
	  cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release $(CUDA_FLAG); \
	fi

# Only the `tapegrad` executable and the library it links.
build: configure
	cmake --build $(BUILD) -j $(JOBS) --target tapegrad

# The main job: a forecaster for the yearly sunspot numbers (a few seconds of training),
# its evaluation, and the loss curve as a PNG.
run: build
	./$(BUILD)/tapegrad train --task timeseries --data data/sunspots.csv --window 24 --horizon 4 \
	  --dim 32 --heads 4 --epochs 30 --batch 16 --lr 3e-3 --warmup 30 --val-frac 0.15 \
	  --save $(BUILD)/sunspots.safetensors --log $(BUILD)/sunspots-log.csv
	./$(BUILD)/tapegrad eval --load $(BUILD)/sunspots.safetensors --data data/sunspots.csv
	./$(BUILD)/tapegrad plot loss --log $(BUILD)/sunspots-log.csv --out $(BUILD)/sunspots-loss.png

# Everything, then the whole suite.
# The tests' own sources compile at -O1 (the library they test stays at -O3): Catch2's assertion
# macros make optimising them slow (a batch of eight test files: 25 s of CPU at -O1, 45 s at -O3),
# and the time the tests run is the library's.
test-build: setup
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release -DTAPEGRAD_CUDA=$(TEST_CUDA) \
	  -DTAPEGRAD_TEST_COMPILE_OPTIONS=-O1
	cmake --build $(BUILD) -j $(JOBS)

test: test-build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS)

clean:
	rm -rf $(BUILD)
