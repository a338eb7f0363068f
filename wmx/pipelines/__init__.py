"""The Beam build of pooled datasets (plan, sources, transforms, runners, options).

Importing the package imports Apache Beam once, quietly: Beam's BigQuery client stub
logs "apitools not found ..." at import time (about Google Cloud packages wmx does not
use) through the root logger, which also installs a root handler when there is none
and so overrides the CLIs' own log format. Both are kept out (`import_beam`).
"""
from __future__ import annotations

import logging
import sys

_BEAM_IMPORT_NOISE = "apitools not found"


class _DropBeamImportNoise(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith(_BEAM_IMPORT_NOISE)


def import_beam():
    """``apache_beam``, imported without its import-time BigQuery warning and without the
    root handler that warning would add (a no-op once Beam is imported)."""
    if "apache_beam" in sys.modules:
        return sys.modules["apache_beam"]
    root, guard, drop = logging.getLogger(), logging.NullHandler(), _DropBeamImportNoise()
    root.addHandler(guard)            # logging.warning() adds a handler to a bare root
    root.addFilter(drop)
    try:
        import apache_beam
    finally:
        root.removeFilter(drop)
        root.removeHandler(guard)
    return apache_beam


import_beam()
