"""Key frames: the reference's selection rules (live and whole-clip), overlap, matching,
stream time and the `embodied-r keyframes` command.

The package imports nothing by itself: the robot's live path imports `rules` and `tracker`
only, never `extraction` (which imports the video decoders).
"""
