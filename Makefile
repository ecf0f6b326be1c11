# `make` sets up and builds, `make run` runs the main job, `make test` runs the whole suite.
BUILD ?= build
JOBS ?= $(shell nproc)
# The OpenBLAS kernel set is pinned (as in CI) so that results do not depend on the host CPU.
export OPENBLAS_CORETYPE ?= Haswell

PACKAGES := cmake g++ make libopenblas-dev libboost-program-options-dev catch2 nlohmann-json3-dev libstb-dev fonts-dejavu-core libopenmpi-dev openmpi-bin

.PHONY: all setup build run test clean

all: build

# Installs only the system packages that are missing.
setup:
	@missing=""; for p in $(PACKAGES); do \
	  dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q "ok installed" || missing="$$missing $$p"; \
	done; \
	if [ -n "$$missing" ]; then \
	  echo "installing:$$missing"; \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq $$missing; \
	fi

$(BUILD)/CMakeCache.txt: | setup
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release

build: setup $(BUILD)/CMakeCache.txt
	cmake --build $(BUILD) -j $(JOBS)

# The main job: a forecaster for the yearly sunspot numbers (about half a minute on 2 cores),
# its evaluation, and the loss curve as a PNG.
run: build
	./$(BUILD)/tapegrad train --task timeseries --data data/sunspots.csv --window 24 --horizon 4 \
	  --dim 32 --heads 4 --epochs 30 --batch 16 --lr 3e-3 --warmup 30 --val-frac 0.15 \
	  --save $(BUILD)/sunspots.safetensors --log $(BUILD)/sunspots-log.csv
	./$(BUILD)/tapegrad eval --load $(BUILD)/sunspots.safetensors --data data/sunspots.csv
	./$(BUILD)/tapegrad plot loss --log $(BUILD)/sunspots-log.csv --out $(BUILD)/sunspots-loss.png

test: build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS)

clean:
	rm -rf $(BUILD)
