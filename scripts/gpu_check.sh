#!/usr/bin/env bash
# One command for a short, offline visit to a CUDA machine (a lease of 15 minutes; one command
# of at most 10). In this order, each step with its own time limit, a failing step never stopping
# the next one:
#   1. kernel parity on the GPU (tests/kernels, default + `gpu` variants)
#   2. benchmarks/gpu_kernels.py --quick (reference vs Triton at the papers' shapes)
#   3. paper-tier smokes, round 1: the FIRST paper config of every method, a few Trainer steps on
#      synthetic inputs of the paper's shapes (common/reproduce/synthetic.py: datasets and Hub
#      weights stand-ins, random init), no torch.compile; peak memory and step time per config in
#      benchmarks/results/gpu_<method>.json (scripts/gpu_smoke.py, one process; scripts/gpu_check.yaml)
#   4. round 2: the other paper configs, in the time left
#   5. --dry-run of every paper config (meta device: parameter counts against the paper's)
# and one JSON summary, benchmarks/results/gpu_check.json (copied with the other outputs to $OUT
# when that is set, as on the lent device machines). Without CUDA it says so and exits 0.
#
#   bash scripts/gpu_check.sh                 # PYTHON=/path/to/python to choose the interpreter
#   bash scripts/gpu_check.sh --cpu           # the same steps on the CPU (TRITON_INTERPRET=1, Hub
#                                             # architectures shrunk, small batches): the script's test
#   GPU_CHECK_BUDGET_S=560   the whole check's deadline in seconds (one device command may run 600)
#   GPU_CHECK_PARITY_S=80 GPU_CHECK_BENCH_S=100   the first two steps' limits
#   GPU_CHECK_FLOOR_S=15     the least a smoke config gets; GPU_CHECK_STEPS=3 Trainer steps per fit
#   GPU_CHECK_METHODS=a,b    only these methods' smokes (default: all)
#   GPU_CHECK_PARITY_K       a pytest -k expression for step 1 (the CPU test runs a few parity tests only)
#   GPU_CHECK_RESULTS=benchmarks/results   where the JSON goes (the CPU test writes to a temporary folder)
# Packages the device image lacks (hydra-core, omegaconf, ...): put their wheels in .whl/ and carry
# it (see /work/.library/device/README.md); they are installed to /tmp/site first.
set -u
cd "$(dirname "$0")/.."
CPU=0
for arg in "$@"; do
    case $arg in
        --cpu) CPU=1 ;;
        *) echo "gpu_check: unknown argument $arg (only --cpu)"; exit 2 ;;
    esac
done
START=$(date +%s)
BUDGET=${GPU_CHECK_BUDGET_S:-560}
STEPS=${GPU_CHECK_STEPS:-3}
FLOOR=${GPU_CHECK_FLOOR_S:-15}
RESULTS=${GPU_CHECK_RESULTS:-benchmarks/results}
export GPU_CHECK_RESULTS=$RESULTS           # where scripts/gpu_smoke.py writes gpu_<method>.json
LOGS=$RESULTS/gpu_check_logs
SMOKE_FLAGS=()
BENCH_FLAGS=(--quick)
if [ "$CPU" = 1 ]; then
    export TRITON_INTERPRET=1               # Triton kernels through the CPU interpreter
    SMOKE_FLAGS=(--cpu)
    BENCH_FLAGS=(--cpu-smoke)               # tiny shapes; the README's benchmark table is left alone
else
    unset TRITON_INTERPRET                  # compiled kernels, not the CPU interpreter
fi

if [ -d .whl ] && ls .whl/*.whl >/dev/null 2>&1; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
        && export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
if [ -n "${PYTHON:-}" ]; then PY=$PYTHON
elif [ -x .venv/bin/python ] && .venv/bin/python -c "import torch" 2>/dev/null; then PY=.venv/bin/python
elif command -v python3 >/dev/null 2>&1; then PY=python3
else PY=python; fi

if [ "$CPU" = 0 ] && ! "$PY" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null; then
    echo "gpu_check: needs CUDA (no CUDA device visible to $PY, or torch missing); nothing to do (--cpu tests it here)."
    exit 0
fi
mkdir -p "$LOGS"
echo "gpu_check: $("$PY" -c "import torch; print(torch.cuda.get_device_name() if torch.cuda.is_available() else 'CPU (--cpu)', 'torch', torch.__version__)")"
"$PY" - > "$LOGS/preflight.json" <<'EOF'
import importlib, json
mods = ["torch", "triton", "pytest", "einops", "numpy", "hydra", "omegaconf", "timm", "scipy", "sklearn",
        "transformers", "pymatgen", "ot", "pyod", "torch_pruning", "networkx", "gguf"]
found = {}
for m in mods:
    try:
        found[m] = getattr(importlib.import_module(m), "__version__", "present")
    except Exception as err:
        found[m] = f"missing: {err!r}"
print(json.dumps(found))
EOF
cat "$LOGS/preflight.json"; echo

STEPS_RUN=()                               # name|rc|seconds|timed_out|log
run_step() {                               # run_step NAME LIMIT_S CMD...
    local name=$1 limit=$2; shift 2
    local left=$(( BUDGET - ($(date +%s) - START) ))
    if [ "$left" -lt 10 ]; then
        echo "== $name: skipped, the check's budget is spent"
        STEPS_RUN+=("$name|skipped|0|0|")
        return
    fi
    [ "$limit" -gt "$left" ] && limit=$left
    echo "== $name (limit ${limit}s): $*"
    local t0=$(date +%s) log="$LOGS/$name.log"
    timeout --kill-after=10 "$limit" "$@" > "$log" 2>&1
    local rc=$? dt=$(( $(date +%s) - t0 ))
    local timed_out=0; { [ $rc -eq 124 ] || [ $rc -eq 137 ]; } && timed_out=1
    tail -n 8 "$log" | cut -c1-400
    echo "== $name: rc=$rc in ${dt}s"
    STEPS_RUN+=("$name|$rc|$dt|$timed_out|$log")
}

# 1. kernel parity: the odd tiny shapes and the larger `gpu` shapes, fp32 and bf16
PARITY_K=()
[ -n "${GPU_CHECK_PARITY_K:-}" ] && PARITY_K=(-k "$GPU_CHECK_PARITY_K")
run_step kernel_parity "${GPU_CHECK_PARITY_S:-80}" "$PY" -m pytest tests/kernels -q -m "gpu or not gpu" -p no:cacheprovider \
    -n 0 --junitxml="$LOGS/kernel_parity.xml" "${PARITY_K[@]}"
# 2. the benchmark; it rewrites its JSON after every row, so a cut-short run still leaves numbers
run_step gpu_kernels "${GPU_CHECK_BENCH_S:-100}" "$PY" benchmarks/gpu_kernels.py "${BENCH_FLAGS[@]}" \
    --out "$RESULTS/gpu_kernels.json" --budget-s "$(( ${GPU_CHECK_BENCH_S:-100} - 10 ))"

# 3-4. paper-tier smokes: every method's first config, then the others; one process per round,
# restarted once after a crash (it skips the configs this check already started)
METHODS_ARG=()
[ -n "${GPU_CHECK_METHODS:-}" ] && METHODS_ARG=(--methods "$GPU_CHECK_METHODS")
for round in first rest; do
    for attempt in 1 2; do
        left=$(( BUDGET - ($(date +%s) - START) - 45 ))   # 45 s kept for the dry run and the summary
        [ "$left" -lt "$FLOOR" ] && break
        run_step "smokes_${round}_$attempt" "$(( left + 10 ))" "$PY" scripts/gpu_smoke.py --round "$round" \
            --steps "$STEPS" --budget-s "$left" --floor-s "$FLOOR" --since "$START" "${SMOKE_FLAGS[@]}" "${METHODS_ARG[@]}"
        rc=${STEPS_RUN[-1]#*|}; rc=${rc%%|*}
        { [ "$rc" = 0 ] || [ "$rc" = 1 ]; } && break      # ran to its end (1: some config failed)
    done
done

# 5. parameter counts of every paper config against the paper's (meta device, no GPU time)
run_step dry_run 60 "$PY" - "$RESULTS/gpu_dry_run.json" "${GPU_CHECK_METHODS:-}" <<'EOF'
import json, sys
sys.path.insert(0, ".")
from common.reproduce.paper import dry_run
from scripts.gpu_smoke import all_methods, plan
rows, status = [], 0
methods = [m for m in sys.argv[2].split(",") if m] or all_methods()
for m in plan(methods):
    status |= dry_run(m, [], rows=rows)
counted = [r for r in rows if r.get("paper_params_m")]
json.dump({"configs": rows, "with_paper_count": len(counted), "mismatch": [r["experiment"] for r in counted if r["status"] != "ok"],
           "errors": [r["experiment"] for r in rows if r.get("status") == "ERROR"]}, open(sys.argv[1], "w"), indent=1)
sys.exit(status)
EOF

printf '%s\n' "${STEPS_RUN[@]}" > "$LOGS/steps.txt"
"$PY" - "$LOGS" "$RESULTS" "$(( $(date +%s) - START ))" "$CPU" "$START" <<'EOF'
import json, sys
import xml.etree.ElementTree as ET
from pathlib import Path

logs, results, seconds, cpu = Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3]), sys.argv[4] == "1"
since = float(sys.argv[5])                 # rows of an earlier check in the same JSON are not this one's
summary = {"seconds": seconds, "mode": "cpu" if cpu else "cuda",
           "preflight": json.loads((logs / "preflight.json").read_text() or "{}"), "steps": {}}
try:
    import torch
    summary["device"] = torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu"
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
smokes, with_step = {}, set()
for path in sorted(results.glob("gpu_*.json")):
    if path.name in ("gpu_check.json", "gpu_kernels.json", "gpu_dry_run.json"):
        continue
    data = json.loads(path.read_text())
    for name, row in data.get("configs", {}).items():
        if row.get("started_at", 0) < since:
            continue
        if (row.get("steps_timed") or 0) > 0 or row.get("status") == "ok":
            with_step.add(data.get("method", path.stem[len("gpu_"):]))
        smokes[name] = {k: row.get(k) for k in ("status", "seconds", "step_s", "first_step_s", "steps_timed",
                                                "peak_gb", "peak_rss_gb")} | \
                       ({"error": row["metrics"]["error"][:300]} if "error" in (row.get("metrics") or {}) else {})
summary["smokes"] = smokes
summary["methods_with_a_step"] = sorted(with_step)
dry = results / "gpu_dry_run.json"
if dry.exists():
    d = json.loads(dry.read_text())
    summary["dry_run"] = {k: d[k] for k in ("with_paper_count", "mismatch", "errors")}
(results / "gpu_check.json").write_text(json.dumps(summary, indent=2) + "\n")
print(json.dumps({k: v for k, v in summary.items() if k not in ("steps", "smokes")}, indent=2))
print(f"smokes: {sum(r['status'] == 'ok' for r in smokes.values())} ok of {len(smokes)}")
EOF
echo "gpu_check: wrote $RESULTS/gpu_check.json in $(( $(date +%s) - START ))s"
if [ -n "${OUT:-}" ] && [ -d "${OUT:-}" ]; then
    # at most 8 files come back: the summary, the benchmark, the dry run, and one archive of the rest
    for f in gpu_check.json gpu_kernels.json gpu_dry_run.json; do
        [ -f "$RESULTS/$f" ] && cp "$RESULTS/$f" "$OUT"/
    done
    (cd "$RESULTS" && tar czf "$OUT/gpu_results.tgz" gpu_*.json gpu_check_logs) 2>/dev/null
    cp common/kernels/README.md "$OUT"/kernels_README.md 2>/dev/null
    echo "gpu_check: copied the results to \$OUT"
fi
exit 0
