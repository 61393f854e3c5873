# Shortcuts for the checks CI runs (.ci/run runs them all).
.PHONY: test scripts e2e ci manifests

test:
	cargo test

# The job scripts on real PostgreSQL and S3-compatible servers.
scripts:
	bash tests/scripts/run.sh

# The end-to-end suite on a real Kubernetes control plane.
e2e:
	bash tests/e2e/run.sh

ci:
	bash .ci/run

# Regenerate every generated file from the code; review the diff.
manifests:
	OPSHOOKS_BLESS=1 cargo test --test integration -- --test-threads 1
