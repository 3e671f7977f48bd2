"""ROS glue shared by the node executables: lifecycle base, parameters, QoS, conversions,
camera/odometry input, question server, status and diagnostics.
"""
