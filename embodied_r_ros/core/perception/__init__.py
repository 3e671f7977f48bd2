"""Perception: the background worker that describes key frames, its parser, progress record
and odometry-measured motion.
"""
