"""Folder → pixels: the one image loader (:mod:`engine.io.imageio`) and the incremental
folder scan (:mod:`engine.io.scan`). The first stage of the data flow."""
