#!/usr/bin/env bash
# One command for a short visit to a CUDA machine (about 10 minutes in all):
#   1. the kernel parity tests on the GPU (tests/kernels, default + `gpu` variants)
#   2. benchmarks/gpu_kernels.py (reference vs Triton at the papers' shapes)
#   3. paper-tier smokes: `scripts/reproduce.py <m> --tier paper --gpu-smoke 50` per method
# and one JSON summary, benchmarks/results/gpu_check.json (copied with the other outputs to
# $OUT when that is set, as on the lent device machines). Every step has its own time limit
# and a failing step never stops the next one. Without CUDA it says so and exits 0.
#
#   bash scripts/gpu_check.sh            # PYTHON=/path/to/python to choose the interpreter
#   GPU_CHECK_BUDGET_S=540   the whole check's deadline, in seconds (defaults shown)
#   GPU_CHECK_PARITY_S=170 GPU_CHECK_BENCH_S=240   the first two steps' limits; the smokes share the rest
#   GPU_CHECK_FORCE=1        run the steps even without CUDA (to test this script on a CPU machine)
set -u
cd "$(dirname "$0")/.."
START=$(date +%s)
BUDGET=${GPU_CHECK_BUDGET_S:-540}
RESULTS=benchmarks/results
LOGS=$RESULTS/gpu_check_logs
unset TRITON_INTERPRET                     # compiled kernels, not the CPU interpreter

if [ -n "${PYTHON:-}" ]; then PY=$PYTHON
elif [ -x .venv/bin/python ] && .venv/bin/python -c "import torch" 2>/dev/null; then PY=.venv/bin/python
elif command -v python3 >/dev/null 2>&1; then PY=python3
else PY=python; fi

if [ -z "${GPU_CHECK_FORCE:-}" ] && ! "$PY" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null; then
    echo "gpu_check: needs CUDA (no CUDA device visible to $PY, or torch missing); nothing to do."
    exit 0
fi
mkdir -p "$LOGS"
echo "gpu_check: $("$PY" -c "import torch; print(torch.cuda.get_device_name() if torch.cuda.is_available() else 'no CUDA (forced)', 'torch', torch.__version__)")"
"$PY" - > "$LOGS/preflight.json" <<'EOF'
import importlib, json
mods = ["torch", "triton", "pytest", "einops", "numpy", "hydra", "omegaconf", "timm", "scipy", "sklearn"]
found = {}
for m in mods:
    try:
        found[m] = getattr(importlib.import_module(m), "__version__", "present")
    except Exception as err:
        found[m] = f"missing: {err!r}"
print(json.dumps(found))
EOF
cat "$LOGS/preflight.json"; echo

STEPS=()                                   # name|rc|seconds|timed_out|log
run_step() {                               # run_step NAME LIMIT_S CMD...
    local name=$1 limit=$2; shift 2
    local left=$(( BUDGET - ($(date +%s) - START) ))
    if [ "$left" -lt 20 ]; then
        echo "== $name: skipped, the check's budget is spent"
        STEPS+=("$name|skipped|0|0|")
        return
    fi
    [ "$limit" -gt "$left" ] && limit=$left
    echo "== $name (limit ${limit}s): $*"
    local t0=$(date +%s) log="$LOGS/$name.log"
    timeout --kill-after=10 "$limit" "$@" > "$log" 2>&1
    local rc=$? dt=$(( $(date +%s) - t0 ))
    local timed_out=0; { [ $rc -eq 124 ] || [ $rc -eq 137 ]; } && timed_out=1
    tail -n 15 "$log"
    echo "== $name: rc=$rc in ${dt}s"
    STEPS+=("$name|$rc|$dt|$timed_out|$log")
}

# 1. kernel parity on the GPU: the odd tiny shapes and the larger `gpu` shapes, fp32 and bf16
run_step kernel_parity "${GPU_CHECK_PARITY_S:-170}" "$PY" -m pytest tests/kernels -q -m "gpu or not gpu" -p no:cacheprovider \
    --junitxml="$LOGS/kernel_parity.xml"
# 2. the benchmark; it rewrites its JSON after every row, so a cut-short run still leaves numbers
run_step gpu_kernels "${GPU_CHECK_BENCH_S:-240}" "$PY" benchmarks/gpu_kernels.py --quick

# ---------------------------------------------------------------- paper-tier smokes
# 50 steps of every method's paper-tier config at the paper's shapes (synthetic inputs where
# the dataset is absent). The --gpu-smoke flag belongs to scripts/reproduce.py (issue #11's
# framework); until it exists these steps fail fast with rc=2 and are recorded as such.
METHODS=$(ls -d methods/*/ | xargs -n1 basename | grep -v '^__')
n_methods=$(echo "$METHODS" | wc -w)
for m in $METHODS; do
    left=$(( BUDGET - ($(date +%s) - START) ))
    share=$(( left / n_methods )); [ "$share" -lt 20 ] && share=20
    run_step "smoke_$m" "$share" "$PY" scripts/reproduce.py "$m" --tier paper --gpu-smoke 50
    n_methods=$(( n_methods - 1 ))
done
# ---------------------------------------------------------------- end of paper-tier smokes

printf '%s\n' "${STEPS[@]}" > "$LOGS/steps.txt"
"$PY" - "$LOGS" "$RESULTS" "$(( $(date +%s) - START ))" <<'EOF'
import json, sys
import xml.etree.ElementTree as ET
from pathlib import Path

logs, results, seconds = Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3])
summary = {"seconds": seconds, "preflight": json.loads((logs / "preflight.json").read_text() or "{}"), "steps": {}}
try:
    import torch
    summary["device"] = torch.cuda.get_device_name()
    summary["torch"] = torch.__version__
except Exception as err:
    summary["device"] = repr(err)
for line in (logs / "steps.txt").read_text().splitlines():
    name, rc, secs, timed_out, log = line.split("|")
    step = {"rc": rc if rc == "skipped" else int(rc), "seconds": int(secs), "timed_out": timed_out == "1"}
    if log and Path(log).exists():
        step["log_tail"] = Path(log).read_text(errors="replace")[-3000:]
    summary["steps"][name] = step
junit = logs / "kernel_parity.xml"
if junit.exists():
    suite = ET.parse(junit).getroot()
    suite = suite if suite.tag == "testsuite" else suite.find("testsuite")
    cases = {"passed": [], "failed": [], "skipped": []}
    for case in suite.iter("testcase"):
        kind = "failed" if case.find("failure") is not None or case.find("error") is not None else \
               "skipped" if case.find("skipped") is not None else "passed"
        cases[kind].append(case.get("name"))
    summary["kernel_parity"] = {k: len(v) for k, v in cases.items()} | {"failed_tests": cases["failed"]}
bench = results / "gpu_kernels.json"
if bench.exists():
    data = json.loads(bench.read_text())
    summary["gpu_kernels"] = {"complete": data.get("complete"), "verdict": data.get("verdict"),
                              "errors": [f"{r['op']} {r.get('dtype')}: {r['error']}" for r in data.get("rows", []) if "error" in r]}
summary["smokes"] = {k[len("smoke_"):]: v["rc"] for k, v in summary["steps"].items() if k.startswith("smoke_")}
(results / "gpu_check.json").write_text(json.dumps(summary, indent=2) + "\n")
print(json.dumps({k: v for k, v in summary.items() if k != "steps"}, indent=2))
EOF
echo "gpu_check: wrote $RESULTS/gpu_check.json in $(( $(date +%s) - START ))s"
if [ -n "${OUT:-}" ] && [ -d "${OUT:-}" ]; then
    cp -r "$RESULTS/gpu_check.json" "$LOGS" "$OUT"/ 2>/dev/null
    [ -f "$RESULTS/gpu_kernels.json" ] && cp "$RESULTS/gpu_kernels.json" "$OUT"/
    cp common/kernels/README.md "$OUT"/kernels_README.md 2>/dev/null
    echo "gpu_check: copied the results to \$OUT"
fi
exit 0
