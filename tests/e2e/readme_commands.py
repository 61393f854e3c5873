#!/usr/bin/env python3
"""The cluster commands of the README and of docs/: every command in their
`sh` blocks that runs kubectl or helm (alone or at the end of a pipe),
continuation lines joined, one per line of output (helm first, each command
once), for run.sh to run as written against the suite's cluster, with the
built `opshooks` on the PATH as `cargo install --path .` puts it.
tests/integration/readme.rs runs the rest (opshooks itself); `docker`
commands are listed on stderr as not run (no engine here).

Usage: readme_commands.py README.md docs/*.md
"""

import re
import sys


def commands(text):
    block, indent = None, ""
    for line in text.splitlines():
        fence = re.match(r"^(\s*)```(\S*)\s*$", line)
        if fence and block is None:
            block, indent = (fence.group(2) == "sh"), fence.group(1)
            pending = ""
            continue
        if fence and block is not None:
            block = None
            continue
        if not block:
            continue
        line = line[len(indent):] if line.startswith(indent) else line.lstrip()
        if not pending and (not line.strip() or line.startswith("#")):
            continue
        if line.endswith("\\"):
            pending += line[:-1]
            continue
        yield pending + line
        pending = ""


def main():
    wanted, skipped = [], []
    found = [c for page in sys.argv[1:] for c in commands(open(page).read())]
    for command in dict.fromkeys(found):
        first = command.split()[0]
        if first in ("helm", "kubectl") or re.search(r"\|\s*kubectl\s", command):
            wanted.append(command)
        elif first == "docker":
            skipped.append(command)
    for command in skipped:
        print(f"not run (no Docker engine): {command}", file=sys.stderr)
    if not wanted:
        sys.exit("no kubectl or helm command found in the pages' sh blocks")
    # The helm installs first: the pages' kubectl commands act on what the
    # chart installs (its CRDs, which stay when the release is uninstalled).
    wanted.sort(key=lambda command: not command.startswith("helm "))
    print("\n".join(wanted))


if __name__ == "__main__":
    main()
