"""Synthetic sample data: a rendered room clip with a known camera path, its rosbag and questions."""
