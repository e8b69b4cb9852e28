"""Shared low-level helpers of every engine layer: argument validation, array
utilities, BLAS thread control, driving progress generators, SplitMix64 hashing.

Nothing here knows about images, features or indexes; every other subpackage may use it.
"""
