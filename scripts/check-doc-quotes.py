#!/usr/bin/env python3
"""Reruns the commands whose output the docs quote and compares the figures.

    scripts/check-doc-quotes.py [--tapegrad build/tapegrad]

Each case below names a page, a command printed there and the output quoted beside it. The
command is taken from the page as printed (so an edited command is what runs), with
`--threads 1` added, in a temporary directory where data/ is the repository's; CASES says what
else, if anything, is added. The quoted lines are compared with what the command printed (or
wrote), figure by figure:

  - counts and everything else that is not a float result (examples, parameters, steps, epochs,
    learning rates, peak bytes, step numbers, names, words): exactly;
  - float results (a loss, a gradient statistic): within --tolerance (relative, default 1%). With
    --threads 1 they repeat to the last digit on one machine and build, but another CPU's SIMD path
    or BLAS kernel rounds differently; 1% still catches a quote from another command or settings;
  - timings (ex/s, ETA, ms/step): not at all.

A quoted line "..." stands for any number of lines: the lines before it are the output's first
lines, those after it its last lines. A CSV quote is the file's first lines. Exit status 0 when
every case matches, 1 with a diff of each mismatch, 2 when a case cannot be found on its page.
"""
import argparse
import os
import re
import shlex
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# name: what the case is, for messages
# page: the Markdown file that prints the command and quotes its output, from the repository root
# command: a regex matching the command in one of the page's ```sh blocks (continuations joined)
# add: flags appended to it besides --threads 1
# quote: where the quoted output is: "next-block" (the next ``` block after the command that
#   starts with `starts`), or "comment" (the `# ...` text after the command on its own line)
# compare: "output" (what the command printed, lines starting with `starts` for a comment), or a
#   file the command writes (a CSV: the quote is its first lines)
CASES = [
    {"name": "training output in 'What training prints'", "page": "docs/cli.md",
     "command": r"^tapegrad train --task timeseries --data data/sunspots\.csv .*--log sun\.csv$",
     "add": [], "quote": "next-block", "starts": "timeseries:", "compare": "output"},
    {"name": "--profile-trace in 'Traces'", "page": "docs/diagnostics.md",
     "command": r"^tapegrad train .*--profile-trace lm\.json",
     "add": [], "quote": "comment", "starts": "wrote ", "compare": "output"},
    # The quote is the CSV's first rows, all of step 1: one step of the run (its schedule is still
    # the 500 steps') writes them.
    {"name": "--grad-stats CSV in 'Gradient statistics and health'", "page": "docs/diagnostics.md",
     "command": r"^tapegrad train .*--grad-stats grads\.csv$",
     "add": ["--stop-after", "1"], "quote": "next-block", "starts": "step,name,",
     "compare": "grads.csv"},
]

NUMBER = re.compile(r"[-+]?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][-+]?\d+)?")
TIMING_AFTER = ("ex/s", "ms/step")  # a number followed by one of these is a timing
FLOAT_RESULT_BEFORE = ("loss",)     # ... preceded by one of these a float result


class CaseError(Exception):
    """The page does not hold what a case looks for."""


def fenced_blocks(text):
    """[(language, first line index, lines)] of a page's ``` blocks."""
    blocks, lines, i = [], text.split("\n"), 0
    while i < len(lines):
        if lines[i].startswith("```"):
            language, start, body = lines[i][3:].strip(), i, []
            i += 1
            while i < len(lines) and not lines[i].startswith("```"):
                body.append(lines[i])
                i += 1
            blocks.append((language, start, body))
        i += 1
    return blocks


def joined_commands(body):
    """The block's lines with backslash continuations joined: [(command, comment)]."""
    commands, pending = [], ""
    for line in body:
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1].strip() + " "
            continue
        command, _, comment = (pending + line.strip()).partition("#")
        commands.append((" ".join(command.split()), comment.strip()))
        pending = ""
    return commands


def find_case(case, blocks):
    """(argv, quoted lines) of a case, or CaseError."""
    for index, (language, _, body) in enumerate(blocks):
        commands = joined_commands(body) if language == "sh" else []
        for position, (command, comment) in enumerate(commands):
            if not command or not re.search(case["command"], command):
                continue
            if case["quote"] == "comment":  # on the command's line, or alone on the next
                following = commands[position + 1:position + 2]
                if not comment and following and not following[0][0]:
                    comment = following[0][1]
                if not comment.startswith(case["starts"]):
                    raise CaseError(f"no '# {case['starts']}...' comment after `{command}`")
                return shlex.split(command), [comment]
            for _, _, quote in blocks[index + 1:]:
                if quote and quote[0].startswith(case["starts"]):
                    return shlex.split(command), quote
            raise CaseError(f"no ``` block starting with '{case['starts']}' after `{command}`")
    raise CaseError(f"no command matching /{case['command']}/ in a ```sh block")


def run(argv, tapegrad, workdir):
    """What the command printed, stdout and stderr through one pipe as on a terminal (progress
    goes to stderr, unbuffered; the closing summary to stdout, flushed at the end)."""
    assert argv[0] == "tapegrad", argv
    done = subprocess.run([tapegrad] + argv[1:], cwd=workdir, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, errors="replace", timeout=600)
    if done.returncode != 0:
        raise RuntimeError(f"`{shlex.join(argv)}` exited with {done.returncode}:\n{done.stdout}")
    return done.stdout.splitlines()


def parts(line):
    """A line as its text between numbers and its numbers: (texts, numbers), len(texts) = n + 1."""
    texts, numbers, start = [], [], 0
    for match in NUMBER.finditer(line):
        texts.append(line[start:match.start()])
        numbers.append(match.group())
        start = match.end()
    texts.append(line[start:])
    return texts, numbers


def roles(texts):
    """What each number of a line is: 'timing', 'float' or 'exact'."""
    result, timing = [], False
    for k in range(len(texts) - 1):
        before, after = " ".join(texts[k].split()), texts[k + 1].strip()
        timing = timing or before.endswith("ETA")  # ETA h:mm and everything after it
        if timing or after.startswith(TIMING_AFTER):
            result.append("timing")
        elif before.endswith(FLOAT_RESULT_BEFORE):
            result.append("float")
        else:
            result.append("exact")
    return result


def csv_roles(header, texts):
    """CSV rows: the float columns are the gradient statistics, the rest is exact."""
    columns = header.split(",")
    floats = {"mean_abs_grad", "grad_norm", "update_ratio", "loss", "val_loss"}
    # a row's numbers in column order; empty cells hold none
    result, column = [], 0
    for k in range(len(texts) - 1):
        column += texts[k].count(",")
        result.append("float" if column < len(columns) and columns[column] in floats else "exact")
    return result


def same_line(quoted, actual, tolerance, csv_header=None):
    """Whether the actual line says what the quoted one does, figure by figure."""
    quoted_texts, quoted_numbers = parts(quoted)
    actual_texts, actual_numbers = parts(actual)
    if len(quoted_numbers) != len(actual_numbers):
        return False
    if [" ".join(t.split()) for t in quoted_texts] != [" ".join(t.split()) for t in actual_texts]:
        return False
    kinds = csv_roles(csv_header, quoted_texts) if csv_header else roles(quoted_texts)
    for kind, q, a in zip(kinds, quoted_numbers, actual_numbers):
        if kind == "exact" and q != a:
            return False
        if kind == "float" and abs(float(q) - float(a)) > tolerance * max(abs(float(q)), 1e-30):
            return False
    return True


def aligned(quote, actual):
    """[(quoted line, actual line or None)]: before '...' the output's first lines, after it the
    last; without '...' every line."""
    if "..." in quote:
        cut = quote.index("...")
        head, tail = quote[:cut], quote[cut + 1:]
        if "..." in tail:
            raise CaseError("a quote with more than one '...' line")
        if len(head) + len(tail) > len(actual):
            return list(zip(quote, actual + [None] * len(quote)))
        return list(zip(head, actual)) + list(zip(tail, actual[len(actual) - len(tail):]))
    return list(zip(quote, actual + [None] * max(0, len(quote) - len(actual)))) + \
        [(None, line) for line in actual[len(quote):]]


def check_case(case, blocks, tapegrad, tolerance):
    """The mismatches of one case, as diff lines (empty when it matches)."""
    argv, quote = find_case(case, blocks)
    argv = argv + ["--threads", "1"] + case["add"]
    with tempfile.TemporaryDirectory(prefix="doc-quotes-") as workdir:
        os.symlink(os.path.join(ROOT, "data"), os.path.join(workdir, "data"))
        printed = run(argv, tapegrad, workdir)
        if case["compare"] == "output":
            actual = [line for line in printed if line.startswith(case["starts"])] \
                if case["quote"] == "comment" else printed
            pairs = aligned(quote, actual)
            header = None
        else:
            with open(os.path.join(workdir, case["compare"]), encoding="utf-8") as f:
                actual = f.read().splitlines()
            pairs = list(zip(quote, actual[:len(quote)] + [None] * len(quote)))
            header = quote[0]
    diff = []
    for quoted, got in pairs:
        csv_header = header if header is not None and quoted != header else None
        if quoted is not None and got is not None and same_line(quoted, got, tolerance, csv_header):
            continue
        diff.append(f"  - quoted: {quoted if quoted is not None else '(no such line)'}")
        diff.append(f"  + actual: {got if got is not None else '(no such line)'}")
    return shlex.join(argv), diff


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tapegrad", default=os.path.join(ROOT, "build", "tapegrad"))
    parser.add_argument("--tolerance", type=float, default=0.01,
                        help="relative tolerance of float results (default 0.01)")
    args = parser.parse_args()
    failed = False
    for case in CASES:
        with open(os.path.join(ROOT, case["page"]), encoding="utf-8") as f:
            blocks = fenced_blocks(f.read())
        try:
            command, diff = check_case(case, blocks, os.path.abspath(args.tapegrad),
                                       args.tolerance)
        except CaseError as error:
            print(f"check-doc-quotes: {case['page']}: {case['name']}: {error}", file=sys.stderr)
            return 2
        print(f"{'ok  ' if not diff else 'FAIL'} {case['name']}: {command}")
        for line in diff:
            print(line)
        failed = failed or bool(diff)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
