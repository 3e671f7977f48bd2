"""Where the repository is, and ROS domain isolation for the tests that use DDS."""

from __future__ import annotations

import itertools
import os
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
_XDIST_WORKERS = max(1, int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")))

# DDS isolation: traffic stays on this host, and every graph a test starts gets a domain
# id of its own (`fresh_ros_domain`), so graphs of earlier tests that are still shutting
# down, other pytest-xdist workers or other ROS processes never answer another test's
# questions. Domain ids 1..231 (FastDDS's usable range) are split between the xdist
# workers: worker k of n takes k+1, k+1+n, k+1+2n, ... starting at a place that depends on
# its process id (two sessions side by side rarely start at the same place), and wraps
# around when it has used them all (by then those graphs have long ended).
os.environ.setdefault("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")
_WORKER = int(os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw") or 0)
_OWN_DOMAINS = list(range(1 + _WORKER % _XDIST_WORKERS, 232, _XDIST_WORKERS))
_DOMAINS = itertools.islice(itertools.cycle(_OWN_DOMAINS), os.getpid() % len(_OWN_DOMAINS), None)


def fresh_ros_domain() -> str:
    """Switch this process (and the children it starts) to a ROS domain id no other test
    of this session is using; rclpy contexts created afterwards use it."""
    os.environ["ROS_DOMAIN_ID"] = str(next(_DOMAINS))
    return os.environ["ROS_DOMAIN_ID"]


fresh_ros_domain()  # a test that does not ask for one still stays in this worker's domains
os.environ.setdefault("RMW_IMPLEMENTATION", "rmw_fastrtps_cpp")
