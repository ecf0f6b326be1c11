#!/usr/bin/env python3
"""Checks that the README's PyTorch snippet works as written.

Takes the two ```sh / ```python blocks of README.md's "In PyTorch" paragraph, runs the sh block's
`tapegrad train` commands (with --tapegrad's binary) in a temporary directory, runs the python
block there as it is, and then checks what the loaded PyTorch models compute against tapegrad:

  - sun (TimeSeriesModel): the mean squared error over every window of data/sunspots.csv, z-scored
    with the statistics in the checkpoint's metadata, against `tapegrad eval --json`'s loss;
  - cls (TextClassifier): the class probabilities of a few texts against `tapegrad sample`'s.

    pip install safetensors torch
    python bench/load_checkpoint_torch.py [--tapegrad build/tapegrad]
"""
import argparse
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile

import torch
from safetensors import safe_open

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TEXTS = ["Computers are useless. They can only give answers.", "the cat sat on the mat", "love and war"]


def readme_blocks():
    """The sh and python blocks of the README's "In PyTorch" paragraph."""
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
        readme = f.read()
    section = readme[readme.index("**In PyTorch**"):]
    sh = re.search(r"```sh\n(.*?)```", section, re.S).group(1)
    python = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    return sh, python


def run(argv):
    return subprocess.run(argv, check=True, capture_output=True, text=True).stdout


def metadata(path):
    with safe_open(path, "pt") as f:
        meta = f.metadata()
    return json.loads(meta["config"]), json.loads(meta["data"])


def text(value):  # a byte string as tapegrad stores it: a JSON string, or an array of byte values
    return value if isinstance(value, str) else bytes(value).decode("utf-8", "replace")


def check_timeseries(model, tapegrad, checkpoint, csv):
    config, state = metadata(checkpoint)
    columns = [text(c) for c in state["columns"]]
    inputs = [columns.index(text(c)) for c in config.get("inputs", [])] or list(range(len(columns)))
    with open(csv, encoding="utf-8") as f:
        rows = [[float(cell) for cell in line.split(",")] for line in f.read().split("\n")[1:] if line.strip()]
    table = (torch.tensor(rows, dtype=torch.float64) - torch.tensor(state["mean"], dtype=torch.float64)) / torch.tensor(
        state["stddev"], dtype=torch.float64)
    window, horizon, target = config["window"], config["horizon"], state["target_column"]
    count = len(rows) - window - horizon + 1
    x = torch.stack([table[i:i + window, inputs] for i in range(count)]).float()
    y = torch.stack([table[i + window:i + window + horizon, target] for i in range(count)]).float()
    with torch.no_grad():
        ours = torch.mean((model(x) - y) ** 2).item()
    theirs = json.loads(run([tapegrad, "eval", "--json", "--load", checkpoint, "--data", csv]))["loss"]
    print(f"timeseries: {count} windows, PyTorch MSE {ours:.6f}, tapegrad eval {theirs:.6f}")
    return abs(ours - theirs) <= 1e-4 * max(1.0, abs(theirs))


def check_textcls(model, tapegrad, checkpoint):
    config, state = metadata(checkpoint)
    vocab = {text(token): i for i, token in enumerate(state["vocab"])}
    labels = [text(label) for label in state["labels"]]
    ok = True
    for sentence in TEXTS:
        tokens = sentence.split() if config["tokenizer"] == "word" else list(sentence)
        ids = torch.tensor([[vocab.get(token, 1) for token in tokens]])  # 1 = <unk>
        with torch.no_grad():
            ours = torch.softmax(model(ids), dim=-1)[0]
        printed = run([tapegrad, "sample", "--load", checkpoint, "--prompt", sentence]).splitlines()[1:]
        theirs = {line.split(": ")[0].strip(): float(line.split(": ")[1]) for line in printed}
        worst = max(abs(ours[i].item() - theirs[label]) for i, label in enumerate(labels))
        print(f"textcls: {sentence!r}: max |probability difference| {worst:.2e} over {len(labels)} labels")
        ok = ok and worst <= 1e-4
    return ok


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tapegrad", default=os.path.join(ROOT, "build", "tapegrad"))
    args = parser.parse_args()
    tapegrad = os.path.abspath(args.tapegrad)
    sh, python = readme_blocks()
    with tempfile.TemporaryDirectory() as tmp:
        os.symlink(os.path.join(ROOT, "data"), os.path.join(tmp, "data"))
        os.chdir(tmp)
        for command in re.sub(r"\\\n\s*", " ", sh).strip().split("\n"):
            argv = shlex.split(command)
            assert argv[0] == "tapegrad", command
            print("$", command)
            subprocess.run([tapegrad] + argv[1:] + ["--threads", "1"], check=True, stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL)
        namespace = {"__name__": "readme"}
        exec(compile(python, "README.md (In PyTorch)", "exec"), namespace)  # as written
        print("the README's block ran: sun and cls loaded")
        ok = check_timeseries(namespace["sun"], tapegrad, "sun.safetensors", "data/sunspots.csv")
        ok = check_textcls(namespace["cls"], tapegrad, "cls.safetensors") and ok
    print("PyTorch and tapegrad agree" if ok else "MISMATCH")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
