#!/usr/bin/env bash
# Regenerates the fuzz seed corpora in fuzz/corpus/<target>/ from the repo's
# own commands (docs/fuzzing.md, "Seeds"): profiles from `chameleon train`
# and `chameleon simulate --memory-curve`, policies from `chameleon plan
# --json`, run JSON from `chameleon simulate --json`, configs from
# docs/config.md, command lines from the CLI tests. Real files run to tens
# of KB; they are cut down (python3, below) to a few KB so that libFuzzer's
# mutations stay fast, and each cut file is checked to still load.
#
#   fuzz/make-seeds.sh [BUILD_DIR]     (default: build; needs BUILD_DIR/chameleon)
#
# Files already in the corpora that this script does not write (regression
# inputs for fixed bugs, regress-*) are kept.
set -euo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$src/build}
bin=$build/chameleon
[ -x "$bin" ] || { echo "make-seeds: no $bin: build it first (make)" >&2; exit 1; }
corpus=$src/fuzz/corpus
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$corpus"/{profile,policy,config,report,cli}

# ---- raw material ---------------------------------------------------------
# A 1-block GPT at 80% of its peak: every phase, passive swaps.
"$bin" train --layers 1 --hidden 8 --heads 1 --seq 8 --batch 1 --steps 12 --quiet \
  --capacity 80% --memory-curve "$tmp/train" >/dev/null
# A paper-scale transformer step (op names and sizes of the LLM workloads).
sim=(simulate --model gpt2 --layers 2 --hidden 256 --ffn 1024 --heads 4 --kv-heads 4
     --seq 1024 --mbs 2 --vocab 1000 --steps 12)
"$bin" "${sim[@]}" --capacity 100MiB --json --memory-curve "$tmp/sim" >"$tmp/run-sim.json"
"$bin" "${sim[@]}" --capacity 100MiB --json >"$tmp/run-policy.json"
"$bin" "${sim[@]}" --capacity 100MiB --overflow-every 5 --validate-every 4 --json \
  >"$tmp/run-dynamic.json"
"$bin" "${sim[@]}" --capacity 30MiB --policy native --json >"$tmp/run-oom.json" || true

python3 - "$tmp" "$corpus" "$src" <<'PY'
import json, re, sys
tmp, corpus, src = sys.argv[1:4]

def dump_lines(obj, arrays):
    """The library's own layout: top-level keys one per line, array elements
    of the keys in `arrays` one per line, compact inside."""
    out = ["{"]
    keys = list(obj)
    for i, k in enumerate(keys):
        v = obj[k]
        comma = "," if i + 1 < len(keys) else ""
        if k in arrays and v:
            out.append(f'  "{k}": [')
            for j, e in enumerate(v):
                out.append("    " + json.dumps(e, separators=(",", ":")) +
                           ("," if j + 1 < len(v) else ""))
            out.append("  ]" + comma)
        else:
            out.append(f'  "{k}": ' + json.dumps(v, separators=(",", ":")) + comma)
    out.append("}")
    return "\n".join(out) + "\n"

def write(path, text):
    with open(path, "w") as f:
        f.write(text)

# ---- profiles: cut to a few ops, a few uses each ----------------------------
def cut_profile(p, keep_ops, max_uses):
    ops = []
    for i in keep_ops:
        op = dict(p["ops"][i])
        op["uses"] = op["uses"][:max_uses]
        ops.append(op)
    q = dict(p)
    q["ops"] = ops
    last = 2 * len(ops)
    q["swaps"] = [s for s in p["swaps"] if s["sample"] <= last][:4]
    return q

prof = json.load(open(f"{tmp}/train/last-step-profile.json"))
n = len(prof["ops"])
write(f"{corpus}/profile/train-head.json",
      dump_lines(cut_profile(prof, range(6), 3), ("tokens", "ops", "swaps")))
# Forward, backward and optimizer ops, so the planners have work to do.
fwd_bwd = [i for i in (2, 5, 10, 15, 17, 21, 26, 30, 33) if i < n]
write(f"{corpus}/profile/train-fwd-bwd.json",
      dump_lines(cut_profile(prof, fwd_bwd, 2), ("tokens", "ops", "swaps")))
sp = json.load(open(f"{tmp}/sim/last-step-profile.json"))
write(f"{corpus}/profile/simulate-head.json",
      dump_lines(cut_profile(sp, range(8), 3), ("tokens", "ops", "swaps")))
empty = {"format": "chameleon-profile", "version": 1, "step": 0, "duration_ns": 0,
         "capacity": 0, "tokens": [], "ops": [], "swaps": []}
write(f"{corpus}/profile/empty.json", dump_lines(empty, ()))

# The hand-made profile of tests/test_plan_cli.sh: three activations, A idle
# from op 2 to op 10, peak 144 MiB; planned at 136 MiB it swaps A.
M, S = 64 << 20, 16 << 20
ptr = {1: 0x00007F0000000000, 2: 0x00007F0004000000, 3: 0x00007F0008000000}
def use(st, size, count, hist, out):
    return {"storage": st, "data_ptr": "0x%016x" % ptr[st], "bytes": size,
            "storage_bytes": size, "dtype": "f32", "use_count": count,
            "history": "0x%016x" % hist, "output": out}
def op(tok, phase, before, after, uses):
    return {"token": tok, "phase": phase, "mem_before": before, "mem_after": after,
            "uses": uses}
hand = {"format": "chameleon-profile", "version": 1, "step": 3, "duration_ns": 120000000,
        "capacity": 85899345920,
        "tokens": ["embed", "linear", "gelu", "matmul", "relu", "loss", "loss_backward",
                   "relu_backward", "matmul_backward", "gelu_backward", "linear_backward",
                   "sgd"],
        "ops": [op(0, "forward", 0, M, [use(1, M, 0, 0, True)]),
                op(1, "forward", M, 2 * M, [use(1, M, 1, 0, False), use(2, M, 0, 0, True)]),
                op(2, "forward", 2 * M, 2 * M, [use(2, M, 1, 1, False)]),
                op(3, "forward", 2 * M, 2 * M + S,
                   [use(2, M, 2, 0x102, False), use(3, S, 0, 0, True)]),
                op(4, "forward", 2 * M + S, 2 * M + S, [use(3, S, 1, 3, False)]),
                op(5, "forward", 2 * M + S, 2 * M, [use(3, S, 2, 0x304, False)]),
                op(6, "backward", 2 * M, 2 * M, []),
                op(7, "backward", 2 * M, 2 * M, []),
                op(8, "backward", 2 * M, M, [use(2, M, 3, 0x10203, False)]),
                op(9, "backward", M, M, []),
                op(10, "backward", M, 0, [use(1, M, 2, 1, False)]),
                op(11, "optimizer", 0, 0, [])],
        "swaps": []}
write(f"{corpus}/profile/plan-test.json", dump_lines(hand, ("tokens", "ops", "swaps")))

# ---- run JSON for the report: series, curve and policy cut short ---------------
def cut_run(r, steps, samples, items):
    r = dict(r)
    r["series"] = {k: v[:steps] for k, v in r["series"].items()}
    c = r.get("memory_curve")
    if isinstance(c, dict):
        c = dict(c)
        c["ops"] = c["ops"][:samples // 2]
        c["in_use_bytes"] = c["in_use_bytes"][:samples]
        c["without_swaps_bytes"] = c["without_swaps_bytes"][:samples]
        r["memory_curve"] = c
    pol = r.get("policy_applied")
    if isinstance(pol, dict):
        pol = dict(pol)
        pol["items"] = pol["items"][:items]
        r["policy_applied"] = pol
    return json.dumps(r, indent=1) + "\n"

for name, steps in (("run-policy", 12), ("run-dynamic", 12), ("run-oom", 12)):
    write(f"{corpus}/report/{name}.json",
          cut_run(json.load(open(f"{tmp}/{name}.json")), steps, 24, 3))
write(f"{corpus}/report/minimal.json", '{"series": {}}\n')

# ---- configs: the example of docs/config.md and a few variants ------------------
doc = open(f"{src}/docs/config.md").read()
example = re.search(r"## Example\s+```json\n(.*?)```", doc, re.S).group(1)
write(f"{corpus}/config/docs-example.json", example)
for name, obj in (
        ("sizes", {"capacity": "1.5GiB", "pinned_budget": "64 gib", "memory_budget": "0.1KiB",
                   "min_swap_bytes": 4096, "allocator_shift": 3, "queue_depth": 0}),
        ("strings", {"preset": None, "backend": "cuda", "mode": "advisor", "planner": "vdnn",
                     "profiler": False, "executor": False, "ordinal": 1}),
        ("numbers", {"peak_flops": 1e15, "hbm_bandwidth": 2.0e12, "length_tolerance": 0,
                     "cosine_threshold": 1, "score_c": 0.5, "launch_ns": 5000.0}),
        ("typo", {"cosine_treshold": 0.9}),
        ("empty", {})):
    write(f"{corpus}/config/{name}.json", json.dumps(obj, indent=2) + "\n")
PY

# A policy needs the profile it plans: the train profile at a capacity where
# the planner succeeds, cut to its first items; and the hand-made one.
"$bin" plan "$tmp/train/last-step-profile.json" --capacity 30000 --reserve 0 --min-swap 0 \
  --json "$tmp/policy-train.json" >/dev/null
"$bin" plan "$corpus/profile/plan-test.json" --device a100-80g --capacity 136MiB --reserve 0 \
  --json "$corpus/policy/plan-test.json" >/dev/null
"$bin" plan "$corpus/profile/plan-test.json" --device a100-80g --reserve 0 \
  --json "$corpus/policy/no-items.json" >/dev/null
python3 - "$tmp/policy-train.json" "$corpus/policy/train-head.json" <<'PY'
import sys
# Cut the item lines after the third (the file is one item per line).
lines = open(sys.argv[1]).read().split("\n")
start = lines.index('  "items": [') + 1
end = lines.index("  ]", start)
items = lines[start:end][:3]
items[-1] = items[-1].rstrip(",")
open(sys.argv[2], "w").write("\n".join(lines[:start] + items + lines[end:]))
PY

# Every cut profile must still load: plan reads it, and fails otherwise only
# when no policy fits.
for f in "$corpus"/profile/*.json; do
  if ! out=$("$bin" plan "$f" 2>&1) && ! grep -q "no policy for" <<<"$out"; then
    echo "make-seeds: $f does not load: $out" >&2
    exit 1
  fi
done

# ---- command lines: one word per line (fuzz/fuzz_cli.c) ---------------------------
cli() { local name=$1; shift; printf '%s\n' "$@" | head -c -1 >"$corpus/cli/$name"; }
cli simulate-small simulate --model llama2 --layers 4 --seq 2048 --mbs 4 --dp 8 --zero 3 \
  --capacity 32GiB --json
cli simulate-dynamic simulate --model mixtral --experts 8 --topk 2 --overflow-prob 0.1 \
  --layer-drop 0.05 --moe-vary on --dtype bf16 --flash off --recompute on --policy vdnn \
  --steps 20 --seed 7 --host-memory 2TiB --device a100-80g --trace t.json \
  --memory-curve dir --quiet --log --tp 2 --pp 2 --gbs 16 --validate-every 5 \
  --overflow-every 3
cli train train --verify --overflow-at 60,140 --capacity 50% --policy capuchin --lr 0.003 \
  --layer-drop 0.02 --min-swap 16KiB --layers 4 --hidden 32 --heads 2 --seq 128 --batch 8 \
  --validate-every 50 --no-loss-scaling --json --steps 200 --seed 1
cli train-bytes train --budget "64 MiB" --device h100-80g --data input.txt \
  --report r.html --trace t.json --memory-curve dir
cli plan plan prof.json --device a100-80g --capacity 136MiB --reserve 0 --layers 4 \
  --free-delay 1 --min-swap 1MiB --json out.json
cli report report run.json --out r.html
cli experiment experiment stability --reduced --device a100-80g --out dir
cli experiment-list experiment --list
cli devices devices --backend sim
cli demo demo --device a100-80g --layers 8
cli help simulate --help
# ---- generator inputs for fuzz_planners: bytes, not files -------------------------
# Read in order by its generator (fuzz/fuzz_planners.c, gen() and then
# LLVMFuzzerTestOneInput): layers, size unit, persistent gradients, per
# layer the parameter's size and an optimizer state, the batch's size,
# per layer view / size / second op / op without tensors, then reserve,
# smallest swap, generations, seed, the capacity's share of the peak and a
# recomputation flag per runtime planner. Each seed is a shape worth
# keeping: one layer; six with everything on; a capacity at a fifth of
# the peak; the smallest swap at 1 MiB (no candidate).
mkdir -p "$corpus/planners"
seed() { local name=$1; shift; printf "$(printf '\\x%02x' "$@")" >"$corpus/planners/$name"; }
seed one-layer 0 3 0 1 1 1 0 1 0 1 1 2 60 1 0 1 0 1
seed six-layers 5 7 1 3 1 2 1 1 0 0 1 2 1 3 0 1 0 0 3 1 0 0 0 2 0 0 1 3 0 0 2 1 0 3 1 2 0 0 \
  0 1 2 1 0 2 3 0 3 9 100 1 1 0 1 0
seed tight 2 1 0 1 1 1 1 2 0 0 0 1 2 1 0 2 0 1 1 1 0 0 0 0 1 2 0 1 1 1
seed no-candidates 3 2 1 2 0 2 1 0 1 3 0 1 1 1 2 0 0 0 3 0 1 2 130 0 0 1 1 0
echo "make-seeds: corpora written to $corpus"
