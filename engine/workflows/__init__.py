"""Workflows over a collection that combine several layers: learning the collection's
similarity from labels or the person's marks (:mod:`engine.workflows.feedback`, the marks
in :mod:`engine.workflows.marks`), and near-duplicate groups with the copy to keep
(:mod:`engine.workflows.duplicates`)."""
