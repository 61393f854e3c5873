"""The hook's reading of what a real script wrote to its termination log.

Each script of ours ends by writing one line to $TERMINATION_LOG, and the
hook reads it with one typed parser (src/operators/report.rs). The scripts'
tests read every termination log through `termination_line` here, which
puts the line through that parser (`opshooks report`) and fails the test
when the hook could not read it: the scripts and the hook are checked
against each other on real output, not each against its own copy of the
words.

Standard library only. The binary is `target/debug/opshooks`, built once per
process (`cargo build`, a no-op after `cargo test`); OPSHOOKS_BIN names
another.
"""

import json
import os
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
_binary = None


def opshooks():
    """The opshooks binary whose parser the tests use."""
    global _binary
    if _binary is None:
        named = os.environ.get("OPSHOOKS_BIN")
        if named:
            _binary = named
        else:
            subprocess.run(["cargo", "build", "--quiet", "--bin", "opshooks"], cwd=REPO, check=True)
            _binary = str(REPO / "target" / "debug" / "opshooks")
    return _binary


def parse(line):
    """The hook's reading of `line` as a dict (`report` names its kind: holds,
    instance, promoted, promoteRefused, promoteFailed, restored,
    restoreFailed, verified, verifyFailed, mark, fetched, recovered,
    baseBackupStored, archiveStep); AssertionError, with the
    parser's words, when the hook cannot read it."""
    out = subprocess.run([opshooks(), "report"], input=line, capture_output=True, text=True)
    assert out.returncode == 0, f"the hook cannot read the line {line!r}: {out.stderr.strip()}"
    return json.loads(out.stdout)


def termination_line(path):
    """The termination log at `path` ("" when there is none), after checking
    that the hook reads it."""
    path = Path(path)
    line = path.read_text() if path.exists() else ""
    if line:
        parse(line)
    return line


def report(path):
    """The hook's reading of the termination log at `path`, which must exist."""
    return parse(Path(path).read_text())
