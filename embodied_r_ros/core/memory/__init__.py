"""Episode memory: the key-frame descriptions of an episode and the text the reasoning LM
reads.
"""
