"""Thin rclpy nodes around `embodied_r_ros.core`: they subscribe, convert, call the core
and publish/serve. No prompt text, parsing or model code lives here."""
