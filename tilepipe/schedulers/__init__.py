"""Tile schedulers: which output tiles each persistent program computes, and in which order (one file each)."""
