# `make` sets up and builds, `make run` runs the main job, `make test` runs the whole suite.
BUILD ?= build
JOBS ?= $(shell nproc)
# The OpenBLAS kernel set is pinned (as in CI) so that results do not depend on the host CPU.
export OPENBLAS_CORETYPE ?= Haswell

PACKAGES := cmake g++ make libopenblas-dev libboost-program-options-dev catch2 nlohmann-json3-dev libstb-dev fonts-dejavu-core

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

run: build
	./$(BUILD)/tapegrad gradcheck

test: build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS)

clean:
	rm -rf $(BUILD)
