"""Authoring: the one source read and its parts joined, the hidden checks inlined, the notebooks
and courses built from it, and the submissions fabricated from it (examples, the preflight's)."""
