#!/usr/bin/env python3
"""Every answer of every operator, checked by a real kube-apiserver.

For each example parent under examples/: read it back as the API server
stored it (defaults applied), ask the running opshooks for its customize
answer and fetch those related objects from the API server, then sync in
two observed states:

  1. first sync: nothing observed;
  2. second sync: the children of the first answer, created for real and
     read back as stored, observed (this catches immutable-field changes).

Every desired child goes to the API server with server-side apply and
strict field validation (dry-run in state 2), and every status goes through
a dry-run status update, so the CRD's status schema judges it.

Also: every invalid parent under tests/e2e/invalid/ must be refused with the
message its `# expect:` line names.

Usage: hooks.py OPSHOOKS_URL REPO_DIR   (kubectl on PATH, KUBECONFIG set)
Prints a summary table; exits 1 on any rejection or refusal missing.
"""

import json
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

FIELD_MANAGER = "opshooks-e2e"


class Tally:
    def __init__(self):
        self.rows = {}
        self.failures = []

    def count(self, what, ok, detail=""):
        row = self.rows.setdefault(what, [0, 0, 0])
        row[0] += 1
        row[1 if ok else 2] += 1
        if not ok:
            self.failures.append(f"{what}: {detail}")

    def report(self):
        print()
        print(f"{'check':<44} {'applied':>8} {'accepted':>9} {'rejected':>9}")
        for what, (n, ok, bad) in sorted(self.rows.items()):
            print(f"{what:<44} {n:>8} {ok:>9} {bad:>9}")
        for f in self.failures:
            print(f"FAIL {f}")
        total = sum(r[0] for r in self.rows.values())
        bad = sum(r[2] for r in self.rows.values())
        print(f"e2e: {total - bad} passed, {bad} failed")
        return bad == 0 and total > 0


def kubectl(*args, stdin=None, check=True):
    proc = subprocess.run(
        ["kubectl", *args], input=stdin, capture_output=True, text=True
    )
    if check and proc.returncode != 0:
        raise RuntimeError(f"kubectl {' '.join(args)}: {proc.stderr.strip()}")
    return proc


def apply(obj, dry_run):
    args = ["apply", "--server-side", "--validate=strict", f"--field-manager={FIELD_MANAGER}", "--force-conflicts", "-f", "-"]
    if dry_run:
        args.insert(1, "--dry-run=server")
    return kubectl(*args, stdin=json.dumps(obj), check=False)


def get_json(*args):
    return json.loads(kubectl("get", *args, "-o", "json").stdout)


def post(url, body):
    req = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read() or b"{}")


def group_key(obj):
    return f"{obj['kind']}.{obj['apiVersion']}"


def keyed(objects):
    """Objects grouped the way hook version v2 sends them."""
    groups = {}
    for o in objects:
        meta = o["metadata"]
        path = f"{meta['namespace']}/{meta['name']}" if meta.get("namespace") else meta["name"]
        groups.setdefault(group_key(o), {})[path] = o
    return groups


def controller_of(repo, op):
    import re

    text = (repo / "metacontroller" / f"{op}-controller.yaml").read_text()
    hooks = set(re.findall(r"url: \S+/" + op + r"/(\w+)", text))
    return hooks


_KINDS = {}


def kind_of(api_version, resource):
    """The Kind the API server serves `resource` of `api_version` as."""
    if not _KINDS:
        for line in kubectl("api-resources", "--no-headers").stdout.splitlines():
            cols = line.split()
            _KINDS[(cols[-3], cols[0])] = cols[-1]
    return _KINDS[(api_version, resource)]


def groups_of(pairs):
    """An empty group per (apiVersion, resource), as Metacontroller sends
    every declared child type and every group a customize rule asked for,
    even when nothing matches."""
    return {f"{kind_of(v, r)}.{v}": {} for v, r in pairs}


def child_types(repo, op):
    """The controller's childResources, as (apiVersion, resource)."""
    import re

    text = (repo / "metacontroller" / f"{op}-controller.yaml").read_text()
    spec = text.split("childResources:", 1)[1].split("generateSelector:", 1)[0]
    return re.findall(r"- apiVersion: (\S+)\n\s+resource: (\S+)", spec)


def with_groups(groups, empty):
    """`groups` with every group of `empty` present."""
    return {**empty, **groups}


def related_from_rules(rules, namespace):
    objects = []
    for rule in rules:
        ns = rule.get("namespace", namespace)
        resource = rule["resource"]
        group = rule["apiVersion"].split("/")[0] if "/" in rule["apiVersion"] else ""
        full = f"{resource}.{group}" if group else resource
        if "names" in rule:
            for name in rule["names"]:
                proc = kubectl("get", full, name, "-n", ns, "-o", "json", check=False)
                if proc.returncode == 0:
                    objects.append(json.loads(proc.stdout))
        else:
            labels = rule.get("labelSelector", {}).get("matchLabels", {})
            selector = ",".join(f"{k}={v}" for k, v in sorted(labels.items()))
            objects.extend(get_json(full, "-n", ns, "-l", selector)["items"])
    for o in objects:
        o.setdefault("apiVersion", o.get("apiVersion"))
    return objects


def related_asked(hooks, rules):
    return "customize" in hooks and isinstance(rules, dict) and "relatedResources" in rules


def check_status(tally, op, state, parent, status):
    stored = get_json(parent["kind"].lower(), parent["metadata"]["name"], "-n", parent["metadata"]["namespace"])
    stored["status"] = status
    proc = kubectl(
        "replace", "--subresource=status", "--dry-run=server", "--validate=strict", "-f", "-",
        stdin=json.dumps(stored), check=False,
    )
    tally.count(f"{op} status ({state})", proc.returncode == 0, proc.stderr.strip())


def sync_and_apply(tally, url, op, state, request, create):
    code, answer = post(f"{url}/{op}/sync", request)
    if code != 200:
        tally.count(f"{op} sync answered ({state})", False, f"{code}: {answer}")
        return []
    tally.count(f"{op} sync answered ({state})", True)
    for child in answer["children"]:
        proc = apply(child, dry_run=not create)
        what = f"{op} child {child['kind']} ({state})"
        tally.count(what, proc.returncode == 0, f"{child['metadata']['name']}: {proc.stderr.strip()}")
    check_status(tally, op, state, request["parent"], answer["status"])
    return answer["children"]


def run_example(tally, url, repo, path):
    for doc in path.read_text().split("\n---\n"):
        if "kind:" not in doc:
            continue
        proc = kubectl("apply", "--server-side", "--validate=strict", f"--field-manager={FIELD_MANAGER}", "-f", "-", "-o", "json", stdin=doc, check=False)
        tally.count(f"example {path.name} accepted", proc.returncode == 0, proc.stderr.strip())
        if proc.returncode != 0:
            continue
        parent = json.loads(proc.stdout)
        op = parent["kind"].lower()
        hooks = controller_of(repo, op)
        ns = parent["metadata"]["namespace"]
        related = []
        rules = {}
        if "customize" in hooks:
            code, rules = post(f"{url}/{op}/customize", {"controller": {}, "parent": parent})
            tally.count(f"{op} customize answered", code == 200, str(rules))
            if code == 200:
                related = related_from_rules(rules["relatedResources"], ns)
        rule_groups = groups_of((r["apiVersion"], r["resource"]) for r in (rules["relatedResources"] if related_asked(hooks, rules) else []))
        child_groups = groups_of(child_types(repo, op))
        base = {"controller": {}, "parent": parent, "related": with_groups(keyed(related), rule_groups), "finalizing": False}
        first = sync_and_apply(tally, url, op, "1 nothing observed", {**base, "children": child_groups}, create=True)
        observed = []
        for child in first:
            meta = child["metadata"]
            proc = kubectl("get", f"{child['kind'].lower()}.{child['apiVersion'].split('/')[0] if '/' in child['apiVersion'] else ''}".rstrip("."), meta["name"], "-n", meta.get("namespace", ns), "-o", "json", check=False)
            if proc.returncode == 0:
                observed.append(json.loads(proc.stdout))
        # Parent as stored now (status may have been written by the dry-runs: no).
        parent = get_json(parent["kind"].lower(), parent["metadata"]["name"], "-n", ns)
        sync_and_apply(tally, url, op, "2 children observed", {**base, "parent": parent, "children": with_groups(keyed(observed), child_groups)}, create=False)


def run_invalid(tally, path):
    text = path.read_text()
    expect = next(line.split(":", 1)[1].strip() for line in text.splitlines() if line.startswith("# expect:"))
    proc = kubectl("apply", "--server-side", "--validate=strict", f"--field-manager={FIELD_MANAGER}", "-f", "-", stdin=text, check=False)
    refused = proc.returncode != 0 and expect in proc.stderr
    tally.count("invalid parent refused with its message", refused, f"{path.name}: expected refusal naming {expect!r}, got rc={proc.returncode} {proc.stderr.strip()}")


def main():
    url, repo = sys.argv[1].rstrip("/"), Path(sys.argv[2])
    tally = Tally()
    for fixture in sorted((repo / "tests/e2e/fixtures").glob("*.yaml")):
        proc = kubectl("apply", "--server-side", "--validate=strict", f"--field-manager={FIELD_MANAGER}", "-f", str(fixture), check=False)
        tally.count("fixture objects accepted", proc.returncode == 0, f"{fixture.name}: {proc.stderr.strip()}")
    for example in sorted((repo / "examples").glob("*.yaml")):
        run_example(tally, url, repo, example)
    for invalid in sorted((repo / "tests/e2e/invalid").glob("*.yaml")):
        run_invalid(tally, invalid)
    sys.exit(0 if tally.report() else 1)


if __name__ == "__main__":
    main()
