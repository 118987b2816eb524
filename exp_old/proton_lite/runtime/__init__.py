"""Launch-time side: profile buffers, copy-back to pinned memory, streaming raw data to disk."""
