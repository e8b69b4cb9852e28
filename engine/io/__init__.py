"""Folder → pixels: the first stage of the data flow.

* :mod:`engine.io.imageio` -- the one image loader (:func:`~engine.io.imageio.load_image`,
  :func:`~engine.io.imageio.load_gray`, :func:`~engine.io.imageio.image_size`);
* :mod:`engine.io.formats` -- which formats are read and how a file's first bytes name its
  format (:func:`~engine.io.formats.sniff_format`, :data:`~engine.io.formats.IMAGE_SUFFIXES`);
* :mod:`engine.io.plugins` -- the optional Pillow plug-ins for HEIC / HEIF, AVIF, JPEG XL;
* :mod:`engine.io.raw` -- camera RAW files through rawpy (LibRaw);
* :mod:`engine.io.errors` -- :class:`~engine.io.errors.ImageLoadError`, the one exception
  a bad file raises;
* :mod:`engine.io.scan` -- the incremental folder scan and content hashing.
"""
