"""What a process pays to load ``--llm local`` (SmolLM2-135M): the GGUF file read as before,
the first load that also keeps the conversion, and a load from the kept conversion
(fairrag_study.converted_model). A benchmark (it prints figures), not a test.

Run: ``.venv/bin/python benchmarks/bench_local_load.py [--repeats 2]``. Each load runs in a
fresh child process (nothing loaded before it) at one torch thread; each child times, in its
own CPU seconds (``time.process_time``) and wall seconds, first the imports of torch and
transformers, then the load alone, then answers one short prompt greedily (30 new tokens).
The modes, alternated ``--repeats`` times:

- ``gguf``: transformers' ``from_pretrained(gguf_file=...)``, as every process loaded before;
- ``convert``: ``_load`` on an empty cache folder: the GGUF file read, then converted, checked
  and kept;
- ``converted``: ``_load`` on the folder the last ``convert`` left.

Printed: each run (with the child's peak resident memory after the load, and for ``convert``
the time of keeping the conversion alone: saving, reading back, comparing, placing), the
median per mode, and whether every answer equals the ``gguf`` one.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CHILD = r"""
import json, resource, sys, time
from pathlib import Path
mode, cache = sys.argv[1], Path(sys.argv[2])
cpu, wall = time.process_time(), time.perf_counter()
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer
from fairrag_study import local_llm
from fairrag_study.local_llm import _load, local_model_file
torch.set_num_threads(1)
kept = []
keep = local_llm.keep_converted
def timed_keep(*args, **kwargs):
    cpu, wall = time.process_time(), time.perf_counter()
    done = keep(*args, **kwargs)
    kept.append((time.process_time() - cpu, time.perf_counter() - wall, done))
    return done
local_llm.keep_converted = timed_keep
imports = (time.process_time() - cpu, time.perf_counter() - wall)
cpu, wall = time.process_time(), time.perf_counter()
if mode == "gguf":
    path = local_model_file("smollm2")
    tokenizer = AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
    model = AutoModelForCausalLM.from_pretrained(
        str(path.parent), gguf_file=path.name, dtype=torch.float32
    ).eval()
else:
    tokenizer, model = _load("smollm2", 1, cache)
load = (time.process_time() - cpu, time.perf_counter() - wall)
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
ids = tokenizer.apply_chat_template(
    [{"role": "user", "content": "Name three women in physics."}],
    add_generation_prompt=True, return_tensors="pt", return_dict=True,
)["input_ids"]
with torch.no_grad():
    out = model.generate(ids, max_new_tokens=30, do_sample=False)
answer = tokenizer.decode(out[0][ids.shape[1]:])
print(json.dumps({"imports": imports, "load": load, "keep": kept, "peak": peak, "answer": answer}))
"""


def run(mode: str, cache: Path) -> dict:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    done = subprocess.run(
        [sys.executable, "-c", CHILD, mode, str(cache)],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    results: dict[str, list[dict]] = {"gguf": [], "convert": [], "converted": []}
    print(f"load of SmolLM2-135M in a fresh process, 1 torch thread, {os.cpu_count()} cores")
    print(
        f"{'run':>4} {'mode':10} {'imports CPU / wall s':>22} {'load CPU / wall s':>20} "
        f"{'peak GiB':>8}  of the load: keeping the conversion CPU / wall s"
    )
    for repeat in range(1, args.repeats + 1):
        with tempfile.TemporaryDirectory(prefix="bench-local-load-") as folder:
            cache = Path(folder)
            for mode in ("gguf", "convert", "converted"):
                found = run(mode, cache)
                results[mode].append(found)
                imports, load = found["imports"], found["load"]
                keep = "".join(f"  {k[0]:.2f} / {k[1]:.2f} (kept: {k[2]})" for k in found["keep"])
                print(
                    f"{repeat:>4} {mode:10} {imports[0]:10.2f} / {imports[1]:6.2f}"
                    f" {load[0]:11.2f} / {load[1]:6.2f} {found['peak']:8.2f}{keep}"
                    f"  (load average {os.getloadavg()[0]:.1f})",
                    flush=True,
                )
    print("median load, CPU / wall s:")
    for mode, found in results.items():
        cpu = statistics.median(r["load"][0] for r in found)
        wall = statistics.median(r["load"][1] for r in found)
        print(f"  {mode:10} {cpu:7.2f} / {wall:7.2f}")
    reference = results["gguf"][0]["answer"]
    same = all(r["answer"] == reference for found in results.values() for r in found)
    print(f"every answer equals the GGUF load's: {same} ({reference!r})")
    return 0 if same else 1


if __name__ == "__main__":
    raise SystemExit(main())
