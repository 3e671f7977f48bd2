"""ROS-free core of embodied_r_ros: key frames, perception, memory, prompts, parsing,
rewards and model backends. Nothing in here imports rclpy; torch and transformers are
imported lazily, only by the backends that need them."""
