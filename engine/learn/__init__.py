"""Learned similarity: OASIS (Chechik et al.) and similarity-sensitive coding, Boosted SSC
and BoostPro (Shakhnarovich) (:mod:`engine.learn.models`)."""

from engine.learn.models import *  # noqa: F403
from engine.learn.models import __all__ as __all__
