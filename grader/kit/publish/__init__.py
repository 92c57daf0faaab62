"""After the deadline and for the learners' platforms: the solutions exported to HTML and PDF, and
the reference notebook run on other Pythons (`make export`, `make compat`)."""
