#!/usr/bin/env python3
"""Random training jobs none of the experiments hold, under every strategy:
finds crashes, hazards, Chameleon behind another strategy and strategies
under the lower bound (docs/testing.md, "Unseen workloads").

  unseen-workloads.py run BINARY N SEED OUT.jsonl   N jobs drawn from SEED
  unseen-workloads.py check OUT.jsonl               what went wrong where
  unseen-workloads.py compare OLD.jsonl NEW.jsonl   Chameleon's step, job by job

The jobs (model shapes of 2-12 layers, sequences of 512-8192 tokens, five
device presets, ZeRO, TP or PP, three precisions, both allocators, static
loops and loops that change, 20-90% of the peak) are the same for a seed,
whatever the binary; SwapAdvisor's search is limited to 2 s of wall
clock, so its figures vary a little from run to run. Times are simulated:
a static loop's median Stable step, a dynamic loop's late mean."""
import json
import math
import random
import subprocess
import sys
import time

STRATEGIES = ["chameleon", "chameleon-swap", "recompute", "capuchin", "vdnn", "protrain",
              "hyperoffload", "swapadvisor"]
FIELDS = ["error", "step_time_s", "late_mean_step_time_s", "hazards", "lower_bound_step_time_s",
          "optimizer", "oom"]


def draw(rng):
    """One job's `chameleon simulate` arguments, and whether its loop changes."""
    model = rng.choice(["gpt2", "llama2", "llama3", "mixtral"])
    a = ["--model", model, "--layers", str(rng.choice([2, 3, 4, 6, 8, 12])),
         "--seq", str(rng.choice([512, 1024, 2048, 4096, 8192])),
         "--mbs", str(rng.choice([1, 1, 2, 4])),
         "--device", rng.choice(["a100-80g", "h100-80g", "ascend-910b", "v100-16g",
                                 "rtx3090-24g"])]
    a += {"zero3": ["--dp", "8", "--zero", "3"], "zero1": ["--dp", "4", "--zero", "1"],
          "tp2": ["--tp", "2"], "pp2": ["--pp", "2"]}.get(
        rng.choice(["", "", "zero3", "zero1", "tp2", "pp2"]), [])
    if rng.random() < 0.2:
        a += ["--precision", rng.choice(["main-grads", "autocast"])]
    if rng.random() < 0.15:
        a += ["--flash", "off"]
    if rng.random() < 0.15:
        a += ["--allocator", rng.choice(["classic", "expandable"])]
    r, dyn = rng.random(), []
    if r < 0.12:
        dyn = ["--accumulate", "2"]
    elif r < 0.22:
        dyn = ["--validate-every", str(rng.choice([3, 5]))]
    elif r < 0.30:
        dyn = ["--layer-drop", "0.2"]
    elif r < 0.36:
        dyn = ["--overflow-every", "4"]
    elif r < 0.40 and model == "mixtral":
        dyn = ["--moe-vary", "on"]
    a += dyn
    a += ["--capacity", "%d%%" % rng.choice([90, 70, 50, 40, 33, 25, 20]),
          "--steps", "60" if dyn else "24", "--seed", str(rng.randint(1, 9))]
    return a, bool(dyn)


def run_one(binary, args, strategy):
    cmd = [binary, "simulate"] + args + ["--strategy", strategy, "--json", "--bound"]
    if strategy == "swapadvisor":
        cmd += ["--search-seconds", "2"]
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    except subprocess.TimeoutExpired:
        return {"rc": "timeout"}
    r = {"rc": p.returncode, "stderr": p.stderr[-800:]}
    try:
        j = json.loads(p.stdout)
        r.update({k: j.get(k) for k in FIELDS})
    except ValueError:
        r["stdout"] = p.stdout[-500:]
    return r


def run(binary, n, seed, out):
    rng = random.Random(seed)
    with open(out, "a") as f:
        for i in range(n):
            args, dyn = draw(rng)
            job = {"i": i, "args": " ".join(args), "dyn": dyn,
                   "runs": {s: run_one(binary, args, s) for s in STRATEGIES}}
            f.write(json.dumps(job) + "\n")
            f.flush()


def load(path):
    return {j["i"]: j for j in map(json.loads, open(path))}


def step(r, dyn):
    """The run's step time in s, None where it did not run to the end."""
    if r.get("rc") != 0 or r.get("error") or r.get("oom"):
        return None
    return r.get("late_mean_step_time_s") if dyn else r.get("step_time_s")


def check(path):
    jobs, ran, bad = load(path), 0, 0
    for job in jobs.values():
        dyn, runs, lines = job["dyn"], job["runs"], []
        for s, r in runs.items():
            # 0 ran, 1 a clear failure (out of memory, a policy that cannot
            # follow), 2 the strategy does not apply: anything else is a crash.
            if r.get("rc") not in (0, 1, 2):
                lines.append(f"{s}: exit {r.get('rc')}: {r.get('stderr', '')[-300:]}")
            elif r.get("rc") == 1 and not r.get("error") and "error" not in r.get("stderr", ""):
                lines.append(f"{s}: exit 1 without an error message")
            if r.get("hazards"):
                lines.append(f"{s}: {r['hazards']} hazards")
        t = {s: step(r, dyn) for s, r in runs.items()}
        ch = t.pop("chameleon")
        others = {s: v for s, v in t.items() if v}
        bound = runs["chameleon"].get("lower_bound_step_time_s")
        if others and not ch:
            lines.append(f"chameleon does not run ({runs['chameleon'].get('error')}) "
                         f"where {', '.join(others)} do")
        if ch and others:
            best = min(others, key=others.get)
            if ch > others[best] * 1.005:
                lines.append(f"chameleon {ch:.4f} s, {100 * (ch / others[best] - 1):+.1f}% "
                             f"behind {best} {others[best]:.4f} s")
        if bound and not dyn:
            for s, v in list(others.items()) + [("chameleon", ch)]:
                if v and v < bound * 0.999:
                    lines.append(f"{s} {v:.4f} s under the bound {bound:.4f} s")
        ran += bool(ch)
        if lines:
            bad += 1
            ratio = f"  (chameleon / bound {ch / bound:.3f})" if ch and bound else ""
            print(f"#{job['i']} {job['args']}{ratio}")
            for line in lines:
                print("    " + line)
    print(f"{len(jobs)} jobs, Chameleon ran {ran}, {bad} with findings")


def compare(old, new):
    a, b = load(old), load(new)
    logs, moved = [], []
    for i in sorted(set(a) & set(b)):
        dyn = a[i]["dyn"]
        x, y = step(a[i]["runs"]["chameleon"], dyn), step(b[i]["runs"]["chameleon"], dyn)
        if x and y:
            logs.append(math.log(y / x))
            if abs(y / x - 1) > 0.005:
                moved.append((y / x, i, x, y, a[i]["args"]))
        elif bool(x) != bool(y):
            print(f"#{i} runs in one and not the other: {x} -> {y}  {a[i]['args']}")
    if logs:
        print(f"{len(logs)} jobs where Chameleon ran in both: geometric mean new / old "
              f"{math.exp(sum(logs) / len(logs)):.4f}; {sum(r < 1 for r, *_ in moved)} faster "
              f"and {sum(r > 1 for r, *_ in moved)} slower by more than 0.5%")
    for r, i, x, y, args in sorted(moved):
        print(f"  #{i} {x:.4f} -> {y:.4f} s ({100 * (r - 1):+.1f}%)  {args}")


if __name__ == "__main__":
    cmd = sys.argv[1] if len(sys.argv) > 1 else ""
    if cmd == "run" and len(sys.argv) == 6:
        run(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5])
    elif cmd == "check" and len(sys.argv) == 3:
        check(sys.argv[2])
    elif cmd == "compare" and len(sys.argv) == 4:
        compare(sys.argv[2], sys.argv[3])
    else:
        sys.exit(__doc__)
