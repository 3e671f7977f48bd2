# Entry points. Each target sets up first (idempotent; seconds when already done).
#   make demo   the whole node graph on the bundled synthetic sample
#   make test   the test suite (everything; what CI runs)
#   make test-quick  the suite without the slow tests (graphs over DDS, training)
#   make setup  only the setup (.venv, pinned deps, colcon build)
SHELL := /bin/bash
ENV := source scripts/env.sh &&
PYTEST_ARGS ?=

.PHONY: setup demo test test-quick colcon-test lint bench-keyframes clean

setup:
	bash scripts/setup.sh

demo: setup
	$(ENV) python -m embodied_r_ros.cli demo $(DEMO_ARGS)

# One pytest-xdist worker per core, at most 4 (TEST_WORKERS=1: one process); a test file
# stays on one worker, so its module fixtures (a launched graph, a served model) start once.
TEST_WORKERS ?= $(shell nproc 2>/dev/null | awk '{print ($$1 > 4) ? 4 : $$1}')
test: setup
	$(ENV) python -m pytest test -n $(TEST_WORKERS) --dist loadfile $(PYTEST_ARGS)

# The suite through colcon (ament_cmake_pytest), as ROS developers run it, on the build
# `make setup` made (BUILD_TESTING=ON).
colcon-test: setup
	$(ENV) cd .ros_ws && colcon --log-base log test --base-paths src --packages-select embodied_r_ros \
	  --event-handlers console_direct+ && colcon --log-base log test-result --verbose

test-quick: setup
	$(ENV) python -m pytest test -m "not slow" -n $(TEST_WORKERS) --dist loadfile $(PYTEST_ARGS)

# The style and type checks the suite runs (test/unit/project/test_lint.py), on their own:
# ruff, mypy over the core, mypy over every package (scripts/typecheck.py; config in mypy.ini).
lint: setup
	$(ENV) ruff check . && mypy embodied_r_ros/core && python scripts/typecheck.py

bench-keyframes: setup
	$(ENV) python -m bench.bench_keyframes --minutes 1

clean:
	rm -rf .ros_ws artifacts .pytest_cache
