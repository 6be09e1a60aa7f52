#!/usr/bin/env bash
# The main job on the embedded default, with no model spend: the scripted model server, the 12-task
# shared sample with stand-in reference files, local sandboxes, and a submission under ./out.
# Then a scripted judge (the same server) grades the run pairwise against stand-in gold and by rubric, so
# the report shows those sections too, labelled as scripted; `--no-judge` first skips it.
set -euo pipefail
judge=1
if [[ "${1:-}" == "--no-judge" ]]; then judge=""; shift; fi
cd "$(dirname "${BASH_SOURCE[0]}")/.."
sample="${GDPVAL_SAMPLE:-../shared/data/gdpval-v1-sample}"
out="${GDPVAL_OUT:-./out}"
bin=.venv/bin

mkdir -p "$out"
dataset="$out/demo-dataset"
# The sample ships without its binary reference files and in the first revision (7 columns): make
# stand-ins with the real names and formats, and the current revision's gold and rubric columns.
[[ -d "$dataset/deliverable_files" ]] || "$bin/python" - "$sample" "$dataset" <<'PY'
import sys
from pathlib import Path
sys.path.insert(0, "tests")
from support.standins import make_standin_dataset
from support.stress import with_standin_gold
with_standin_gold(make_standin_dataset(Path(sys.argv[1]), Path(sys.argv[2])))
PY

port="$("$bin/python" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
"$bin/gdpval" fake-model --make-files --judge-prefers content --port "$port" >"$out/fake-model.log" 2>&1 &
server=$!
trap 'kill $server 2>/dev/null || true' EXIT
"$bin/python" - "$port" <<'PY'
import socket, sys, time
for _ in range(100):
    try:
        socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=1).close()
        break
    except OSError:
        time.sleep(0.1)
PY

"$bin/gdpval" run --dataset "$dataset" --model scripted --base-url "http://127.0.0.1:$port/v1" \
  --output "$out" --run-name demo "$@"
[[ -n "$judge" ]] || exit 0
echo "scripted judge: its verdicts come from a hash of each file set, not from a model; they show the pipeline and measure nothing"
"$bin/gdpval" judge --output "$out" --run-name demo --method both --judge-model scripted --judge-base-url "http://127.0.0.1:$port/v1" \
  >"$out/judge-summary.json"
"$bin/gdpval" report --output "$out" --run-name demo >/dev/null
echo "report with the scripted judge's sections: $out/runs/demo/report.html"
