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
[[ -d "$dataset/reference_files" ]] || "$bin/python" tests/support/standins.py "$sample" "$dataset"

port="$("$bin/python" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
"$bin/gdpval" fake-model --port "$port" >"$out/fake-model.log" 2>&1 &
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
