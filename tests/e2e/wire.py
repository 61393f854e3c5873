#!/usr/bin/env python3
"""The hook bodies opshooks documents are exactly Metacontroller's.

Reads the JSON tags of CompositeHookRequest and CompositeHookResponse from
Metacontroller's own source (both hook versions) and compares them with the
properties of the SyncRequest and SyncResponse schemas in the OpenAPI
document a running opshooks serves, which are derived from the Rust wire
types in src/hook.rs. A field added on either side fails here: an extra
answer field would be refused by Metacontroller's strict decoder.

Usage: wire.py OPENAPI_URL METACONTROLLER_SRC
"""
import json
import re
import sys
import urllib.request
from pathlib import Path


def go_fields(source: str, struct: str) -> set[str]:
    body = re.search(r"type %s struct \{(.*?)\n\}" % struct, source, re.S)
    if not body:
        sys.exit(f"FAIL: struct {struct} not found in Metacontroller's source")
    fields = set(re.findall(r'json:"([^",]+)', body.group(1)))
    # Two empty sets are equal: a parse that finds no tags would pass.
    if not fields:
        sys.exit(f"FAIL: no JSON tags read from Metacontroller's {struct}")
    return fields


def main() -> None:
    url, src = sys.argv[1], Path(sys.argv[2])
    doc = json.load(urllib.request.urlopen(url, timeout=10))
    schemas = doc["components"]["schemas"]
    failures = 0
    for version in ("v1", "v2"):
        hooks = (src / "pkg/controller/composite/api" / version / "hooks.go").read_text()
        for struct, suffix in (("CompositeHookRequest", "SyncRequest"), ("CompositeHookResponse", "SyncResponse")):
            theirs = go_fields(hooks, struct)
            compared = 0
            for name, schema in schemas.items():
                if not name.endswith(suffix):
                    continue
                compared += 1
                ours = set(schema["properties"])
                if ours != theirs:
                    failures += 1
                    print(f"FAIL: {name} has {sorted(ours)}; Metacontroller {version} {struct} has {sorted(theirs)}")
                else:
                    print(f"ok: {name} = Metacontroller {version} {struct}: {sorted(ours)}")
            # A renamed schema would otherwise leave nothing compared, and pass.
            if not compared:
                failures += 1
                print(f"FAIL: no schema named *{suffix} to compare with Metacontroller {version} {struct}")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
