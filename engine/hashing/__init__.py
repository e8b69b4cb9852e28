"""Encoders for sub-linear search: winner-take-all hashing (Yagnik et al.; densified WTA,
Chen & Shrivastava) and pyramid-match locality-sensitive hashing (thesis ch. 5)."""
