"""Encoders for sub-linear search: winner-take-all hashing (Yagnik et al.; densified WTA,
Chen & Shrivastava) and pyramid-match locality-sensitive hashing (thesis ch. 5).

Modules: :mod:`~engine.hashing.wta` (WTA codes and their agreement),
:mod:`~engine.hashing.lsh` (random-hyperplane hashing of the pyramid-match embedding; it
also re-exports the names of the next three), :mod:`~engine.hashing.keyed` (hashed random
vectors over sparse int64 keys), :mod:`~engine.hashing.bands` (banding of codes into
tables) and :mod:`~engine.hashing.l1` (the L1 embedding of equal-size sets and its
p-stable index).
"""
