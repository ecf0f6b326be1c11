#!/usr/bin/env python3
"""Checks that the PyTorch snippet of docs/checkpoints.md works as written.

Takes the two ```sh / ```python blocks of docs/checkpoints.md's "In PyTorch" section, runs the
sh block's `tapegrad train` and `tapegrad export` commands (with --tapegrad's binary) in a
temporary directory, runs the python block there as it is (the tutorial's own classes,
PositionalEncoding with its buffer pe [1, 5000, d_model], loading the exports with
load_state_dict(strict=True)), and then checks what the loaded PyTorch models compute against
tapegrad:

  - sun (TimeSeriesModel): the mean squared error over every window of data/sunspots.csv, z-scored
    with the statistics in the export's metadata, against `tapegrad eval --json`'s loss;
  - cls (TextClassifier): the class probabilities of a few texts against `tapegrad sample`'s;
  - the files: the checkpoints hold pos_encoding.pe [1, --max-len, d], the exports [1, 5000, d]
    and no optimizer state; a state_dict saved from PyTorch, with the table its PositionalEncoding
    computes in f32, loads back into `tapegrad eval` and gives the same loss.

    pip install safetensors torch
    python bench/load_checkpoint_torch.py [--tapegrad build/tapegrad] [--page docs/checkpoints.md]

Without PyTorch or safetensors it prints why and exits 77 (CTest's "skipped").
"""
import argparse
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile

try:
    import torch
    from safetensors import safe_open
    from safetensors.torch import load_file, save_file
except ImportError as missing:  # CI without PyTorch: CTest counts exit code 77 as skipped
    print(f"skipped: {missing} (pip install safetensors torch)")
    sys.exit(77)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TEXTS = ["Computers are useless. They can only give answers.", "the cat sat on the mat", "love and war"]


def page_blocks(path):
    """The sh and python blocks of the page's "In PyTorch" section."""
    with open(path, encoding="utf-8") as f:
        page = f.read()
    section = page[page.index("## In PyTorch"):]
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


def word_kind(ch):
    """What a character is to tapegrad's word tokenizer (train/datasets.cpp, word_char_at)."""
    point = ord(ch)
    white_space = (0x85, 0xA0, 0x1680, 0x2028, 0x2029, 0x202F, 0x205F, 0x3000)
    if ch in " \t\n\r\f\v" or point in white_space or 0x2000 <= point <= 0x200A:
        return "space"
    if point < 0x80:
        return "word" if ch.isalnum() else "apostrophe" if ch == "'" else "symbol"
    if point == 0x2019:
        return "apostrophe"
    punctuation = point <= 0xBF or point in (0xD7, 0xF7) or 0x2000 <= point <= 0x206F
    return "symbol" if punctuation or 0x3000 <= point <= 0x303F else "word"


def tokenize(text, tokenizer):
    """tapegrad's tokenizers: char, word (A-Z lowercased, punctuation apart), whitespace."""
    if tokenizer == "char":
        return list(text)
    if tokenizer == "whitespace":
        return text.split()
    tokens, word = [], ""
    for i, ch in enumerate(text):
        kind = word_kind(ch)
        next_is_word = i + 1 < len(text) and word_kind(text[i + 1]) == "word"
        if kind == "word" or (kind == "apostrophe" and word and next_is_word):
            word += "'" if kind == "apostrophe" else ch.lower() if ord(ch) < 0x80 else ch
            continue
        if word:
            tokens.append(word)
            word = ""
        if kind != "space":
            tokens.append(ch)
    return tokens + [word] if word else tokens


def check_textcls(model, tapegrad, checkpoint):
    config, state = metadata(checkpoint)
    vocab = {text(token): i for i, token in enumerate(state["vocab"])}
    labels = [text(label) for label in state["labels"]]
    ok = True
    for sentence in TEXTS:
        tokens = tokenize(sentence, config["tokenizer"])
        ids = torch.tensor([[vocab.get(token, 1) for token in tokens]])  # 1 = <unk>
        with torch.no_grad():
            ours = torch.softmax(model(ids), dim=-1)[0]
        printed = run([tapegrad, "sample", "--load", checkpoint, "--prompt", sentence]).splitlines()[1:]
        theirs = {line.split(": ")[0].strip(): float(line.split(": ")[1]) for line in printed}
        worst = max(abs(ours[i].item() - theirs[label]) for i, label in enumerate(labels))
        print(f"textcls: {sentence!r}: max |probability difference| {worst:.2e} over {len(labels)} labels")
        ok = ok and worst <= 1e-4
    return ok


# The page's files: each model's checkpoint (train --save) and its export (tapegrad export).
FILES = {"sun": ("sun.safetensors", "sun-model.safetensors"), "cls": ("cls.safetensors", "cls-model.safetensors")}


def run_sh_block(tapegrad, sh):
    """Runs the block's tapegrad commands; train on one thread (other jobs may share the machine)."""
    for command in re.sub(r"\\\n\s*", " ", sh).strip().split("\n"):
        argv = shlex.split(command)
        assert argv[0] == "tapegrad", command
        print("$", command)
        threads = ["--threads", "1"] if argv[1] == "train" else []
        subprocess.run([tapegrad] + argv[1:] + threads, check=True, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL)


def check_files(namespace):
    """The checkpoints hold pos_encoding.pe at --max-len rows; the exports at the tutorial's 5000,
    the model's state_dict and nothing else (no optimizer state)."""
    ok = True
    for name, (checkpoint, export) in FILES.items():
        config, _ = metadata(checkpoint)
        saved, exported = load_file(checkpoint), load_file(export)
        dim = config["dim"]
        own = namespace["PositionalEncoding"](dim).pe  # the table the tutorial's class computes
        drift = (exported["pos_encoding.pe"] - own).abs().max().item()
        optimizer = [key for key in exported if key.startswith("optimizer.")]
        print(f"{name}: checkpoint pos_encoding.pe {list(saved['pos_encoding.pe'].shape)} (--max-len "
              f"{config['max_len']}), export {list(exported['pos_encoding.pe'].shape)}, {len(exported)} "
              f"tensors, {len(optimizer)} optimizer; max |export pe - PyTorch's f32 pe| {drift:.1e}")
        ok = ok and tuple(saved["pos_encoding.pe"].shape) == (1, config["max_len"], dim)
        ok = ok and tuple(exported["pos_encoding.pe"].shape) == (1, 5000, dim) and not optimizer
        ok = ok and set(exported) == set(namespace[name].state_dict()) and drift <= 1e-6 * 5000
    return ok


def tapegrad_eval(tapegrad, path, csv):
    """`tapegrad eval --json` of `path` on `csv`: (exit code, its output or its error line)."""
    done = subprocess.run([tapegrad, "eval", "--json", "--threads", "1", "--load", path, "--data", csv],
                          capture_output=True, text=True)
    return done.returncode, (done.stdout if done.returncode == 0 else done.stderr).strip()


def check_pytorch_round_trip(namespace, tapegrad, csv):
    """sun's state_dict saved from PyTorch, with the table its PositionalEncoding computes in f32,
    evaluates in tapegrad as the export does; a table that is not the sinusoid is refused."""
    state = {key: value.contiguous() for key, value in namespace["sun"].state_dict().items()}
    state["pos_encoding.pe"] = namespace["PositionalEncoding"](state["pos_encoding.pe"].shape[-1]).pe
    with safe_open(FILES["sun"][1], "pt") as f:
        meta = f.metadata()  # the config and data encoding tapegrad needs
    save_file(state, "from-pytorch.safetensors", metadata=meta)
    state["pos_encoding.pe"] = state["pos_encoding.pe"] * 1.01  # a table trained or edited
    save_file(state, "edited-pe.safetensors", metadata=meta)
    export = tapegrad_eval(tapegrad, FILES["sun"][1], csv)
    back = tapegrad_eval(tapegrad, "from-pytorch.safetensors", csv)
    edited = tapegrad_eval(tapegrad, "edited-pe.safetensors", csv)
    print(f"PyTorch's state_dict back in tapegrad eval: {back[1]} (the export: {export[1]})")
    print(f"with pe * 1.01: exit {edited[0]}: {edited[1]}")
    return back == export and edited[0] == 2 and "not the sinusoidal table" in edited[1]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tapegrad", default=os.path.join(ROOT, "build", "tapegrad"))
    parser.add_argument("--page", default=os.path.join(ROOT, "docs", "checkpoints.md"),
                        help="the Markdown file whose \"In PyTorch\" section holds the blocks")
    args = parser.parse_args()
    tapegrad = os.path.abspath(args.tapegrad)
    sh, python = page_blocks(os.path.abspath(args.page))
    assert "strict=True" in python and "strict=False" not in python, "the block must load strictly"
    with tempfile.TemporaryDirectory() as tmp:
        os.symlink(os.path.join(ROOT, "data"), os.path.join(tmp, "data"))
        os.chdir(tmp)
        run_sh_block(tapegrad, sh)
        namespace = {"__name__": "checkpoints_md"}
        exec(compile(python, "docs/checkpoints.md (In PyTorch)", "exec"), namespace)  # as written
        print(f"the page's block ran: sun and cls loaded with strict=True (torch {torch.__version__})")
        ok = check_files(namespace)
        ok = check_timeseries(namespace["sun"], tapegrad, FILES["sun"][1], "data/sunspots.csv") and ok
        ok = check_textcls(namespace["cls"], tapegrad, FILES["cls"][1]) and ok
        ok = check_pytorch_round_trip(namespace, tapegrad, "data/sunspots.csv") and ok
    print("PyTorch and tapegrad agree" if ok else "MISMATCH")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
