#!/usr/bin/env bash
# Copy the generated CRDs (crds/ at the repository root) into the chart. The chart keeps a copy,
# not a symlink, so it stays self-contained for `helm package`, OCI registries and GitOps tools that
# refuse links out of the chart folder. tests/integration/test_chart_crd.py fails while the two differ.
set -euo pipefail
chart="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cp "$chart/../../crds/"*.yaml "$chart/files/crds/"
echo "synced: $(ls "$chart/files/crds")"
