"""Features → set-matching kernels and encoders: the pyramid match (uniform and
vocabulary-guided bins, thesis ch. 3-4), the spatial pyramid, exact optimal partial
matching (the reference) and explicit correspondences."""
