"""Video decoding: sampled-frame readers (PyAV, OpenCV) and the ordered thread-pool map
used by whole-clip extraction.
"""
