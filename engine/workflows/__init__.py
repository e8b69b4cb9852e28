"""Workflows over a collection that combine several layers: learning the collection's
similarity from labels or the person's marks (:mod:`engine.workflows.feedback`)."""
