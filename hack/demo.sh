#!/usr/bin/env bash
# The main job on the embedded default, with no model spend: the scripted model server, the 12-task
# shared sample with stand-in reference files, local sandboxes, and a submission under ./out.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
sample="${GDPVAL_SAMPLE:-../shared/data/gdpval-v1-sample}"
out="${GDPVAL_OUT:-./out}"
bin=.venv/bin

mkdir -p "$out"
dataset="$out/demo-dataset"
# The sample ships without its binary reference files: make stand-ins with the real names and formats.
[[ -d "$dataset/reference_files" ]] || "$bin/python" - "$sample" "$dataset" <<'PY'
import sys
from pathlib import Path
sys.path.insert(0, "tests")
from support.standins import make_standin_dataset
make_standin_dataset(Path(sys.argv[1]), Path(sys.argv[2]))
PY

port="$("$bin/python" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
"$bin/gdpval" fake-model --make-files --port "$port" >"$out/fake-model.log" 2>&1 &
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
