"""The chapter-34 kit: build the notebooks from the one source, normalise and grade submissions."""

import sys

# jsonschema, imported by nbformat, loads rfc3987_syntax when it is installed (jupyter_events
# pulls it in), and that module compiles a Lark grammar at import: 2.4 s of CPU before any kit
# command can start. It only serves jsonschema's "iri" format checks, which run only when a
# FormatChecker is passed, and nothing here passes one.
sys.modules.setdefault("rfc3987_syntax", None)
