"""The lab: conformance, tests and benchmarks on contributed hardware, with their results,
regressions, ownership and health in one place (docs/lab.md).

- `_suite`: suites (named, versioned TOML files of checks) and how a finished check's output
  becomes verdicts;
- `_store`: the results store (SQLite or PostgreSQL, numbered migrations, the results document);
- `_analysis`: flaky checks, regressions (E-divisive means), staleness, ownership, capacity,
  tickets and trends with noise bands;
- `_triage`: why a check failed (hardware, infrastructure, code), from evidence taken when it ran;
- `_run`: dispatch through Ray, quarantine; `_bisect`: the first bad commit, through Ray;
- `_pages`: the pages as files, which the node agent serves (`accel agent --lab-pages`);
- `_repro`: what differs from a run's environment, and the quoted commands that run it again.

Needs Python 3.11 or later (`tomllib`). Ray is imported only where a run is dispatched."""

from __future__ import annotations

from ._store import RESULTS_SCHEMA, DocumentError, Store, StoreError, fingerprint_hash, open_store
from ._suite import Check, Outcome, Suite, SuiteError, interpret, load_suite, parse_suite

__all__ = ["Check", "Outcome", "Suite", "SuiteError", "interpret", "load_suite", "parse_suite"]
__all__ += ["RESULTS_SCHEMA", "DocumentError", "Store", "StoreError", "fingerprint_hash", "open_store"]
