"""config/fastdds_large_images.xml delivers camera-size best-effort images between two
processes on one host (the default transports lost most of them on these machines; the
benchmark bench/bench_dds_images.py prints both numbers)."""

from __future__ import annotations

import pytest

from bench.bench_dds_images import PROFILE, measure

from helpers.env import REPO_ROOT, fresh_ros_domain

pytestmark = pytest.mark.slow  # trains, builds or pushes long loads


def test_large_image_profile_delivers_720p_frames() -> None:
    received = measure(PROFILE, frames=20, width=1280, height=720, rate=10.0,
                       domain=fresh_ros_domain())
    assert received >= 18, f"only {received} of 20 frames arrived with the profile"


def test_profile_is_what_the_environment_script_sets() -> None:

    env_sh = (REPO_ROOT / "scripts" / "env.sh").read_text()
    assert "FASTDDS_DEFAULT_PROFILES_FILE" in env_sh and PROFILE.name in env_sh
