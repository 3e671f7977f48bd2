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

test: setup
	$(ENV) python -m pytest test $(PYTEST_ARGS)

# The suite through colcon (ament_cmake_pytest), as ROS developers run it.
colcon-test: setup
	$(ENV) cd .ros_ws && colcon --log-base log build --base-paths src --cmake-args -DBUILD_TESTING=ON \
	  -DPython3_EXECUTABLE=$$VIRTUAL_ENV/bin/python > last_test_build.log 2>&1 && \
	  colcon --log-base log test --base-paths src --packages-select embodied_r_ros \
	  --event-handlers console_direct+ && colcon --log-base log test-result --verbose

test-quick: setup
	$(ENV) python -m pytest test -m "not slow" $(PYTEST_ARGS)

bench-keyframes: setup
	$(ENV) python -m bench.bench_keyframes --minutes 1

clean:
	rm -rf .ros_ws artifacts .pytest_cache
