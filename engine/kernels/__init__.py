"""Features → set-matching kernels and encoders: the pyramid match (uniform and
vocabulary-guided bins, thesis ch. 3-4), the spatial pyramid, exact optimal partial
matching (the reference) and explicit correspondences.

Modules, in the order a newcomer reads them:

* :mod:`~engine.kernels.pyramid` -- :class:`PyramidMatch`, the kernel, costs, matches;
* :mod:`~engine.kernels.binning` -- the :class:`Binning` protocol, uniform shifted grids,
  the small PCA;
* :mod:`~engine.kernels.codes` -- encoded batches (:class:`PyramidCodes`) and the bulk
  bilinear products behind kernel and cost matrices;
* :mod:`~engine.kernels.embedding` -- the explicit sparse feature map and its stable keys;
* :mod:`~engine.kernels.vocabulary` -- the vocabulary tree (hierarchical k-means bins),
  fitted with the batched k-means of :mod:`~engine.kernels.kmeans`;
  :mod:`~engine.kernels.words` -- tf-idf bags of its visual words;
* :mod:`~engine.kernels.spatial` -- the spatial pyramid match;
* :mod:`~engine.kernels.optimal`, :mod:`~engine.kernels.correspondences` -- exact optimal
  partial matching and per-bin correspondences.
"""
