#!/usr/bin/env python3
"""The attention viewer (`tapegrad plot attention --html`) in a real browser.

Trains tiny models (a text classifier, a char LM, a timeseries model, and a Linformer text
classifier, whose implied weights are signed), writes each one's page, opens it in headless
Chromium (Debian's `chromium` package) with --dump-dom, and checks the DOM the page's script
built: <body data-status="ok"> with no data-errors (a script error of any kind sets them, see
plot/attention_html_assets.cpp), one thumbnail a layer and head, one toggle a head, one menu entry
a layer, one position a label on each side, and lines drawn. The page is opened as page#selftest:
its script then drives its own controls (a thumbnail click, hovering a query and a key, a head
toggle, "all", the layer menu) through their event handlers and reports in data-selftest; and
once as page#layer=L&heads=H&focus=query:Q, the view such an address names. Exits 77 (ctest's
skip) with a message where Chromium is not installed.

    attention_viewer_browser.py --tapegrad build/tapegrad
    attention_viewer_browser.py --tapegrad build/tapegrad \
        --screenshot docs/images/attention-viewer.png

--screenshot also trains a char LM on data/corpus.txt for 300 steps (about 20 s) and saves its
page at 1200 x 800, one query focused (docs/images/attention-viewer.png). Python's standard
library only.
"""
import argparse
import html.parser
import math
import os
import shutil
import subprocess
import sys
import tempfile

SOURCE_DIR = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TINY = ["--batch", "4", "--threads", "1", "--dropout", "0", "--seed", "3"]


def find_chromium():
    """The browser: $TAPEGRAD_CHROMIUM, else chromium or chromium-browser on the PATH."""
    for name in (os.environ.get("TAPEGRAD_CHROMIUM"), "chromium", "chromium-browser"):
        if name and shutil.which(name):
            return shutil.which(name)
    return None


def run(command, timeout=240):
    """Runs a command; its stdout, or a failure that shows its stderr."""
    result = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
    if result.returncode != 0:
        sys.exit("failed (%d): %s\n%s" % (result.returncode, " ".join(command), result.stderr))
    return result.stdout


def chromium_command(chromium, profile, *arguments):
    """Headless Chromium as a container runs it: no sandbox, no GPU, a throwaway profile."""
    return [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
            "--no-first-run", "--hide-scrollbars", "--user-data-dir=" + profile, *arguments]


class PageDom(html.parser.HTMLParser):
    """What the test reads from a dumped DOM: the body's attributes and element counts."""

    def __init__(self):
        super().__init__()
        self.body = {}
        self.classes = {}
        self.layer_options = 0
        self.in_layer_select = False
        self.in_readout = False
        self.readout = ""

    def handle_starttag(self, tag, attrs):
        attributes = dict(attrs)
        if tag == "body":
            self.body = attributes
        for name in (attributes.get("class") or "").split():
            self.classes[(tag, name)] = self.classes.get((tag, name), 0) + 1
        if tag == "select" and attributes.get("id") == "tg-layer":
            self.in_layer_select = True
        if tag == "option" and self.in_layer_select:
            self.layer_options += 1
        self.in_readout = attributes.get("id") == "tg-readout"

    def handle_endtag(self, tag):
        if tag == "select":
            self.in_layer_select = False
        self.in_readout = False

    def handle_data(self, data):
        if self.in_readout:
            self.readout += data


def dumped_dom(chromium, profile, address):
    """The DOM of the page at `address` once its script ran, parsed."""
    dom = PageDom()
    dom.feed(run(chromium_command(chromium, profile, "--dump-dom", address)))
    return dom


def check_page(chromium, profile, page, layers, heads, positions):
    """Opens the page and checks the DOM its script built; returns a one-line summary."""
    dom = dumped_dom(chromium, profile, "file://" + page + "#selftest")
    name = os.path.basename(page)
    problems = []

    def expect(what, got, wanted):
        if got != wanted:
            problems.append("%s: %r, expected %r" % (what, got, wanted))

    expect("data-status", dom.body.get("data-status"), "ok")
    expect("data-errors", dom.body.get("data-errors"), "")
    expect("data-selftest", dom.body.get("data-selftest"), "ok")
    expect("data-layers", dom.body.get("data-layers"), str(layers))
    expect("data-heads", dom.body.get("data-heads"), str(heads))
    expect("thumbnails", dom.classes.get(("canvas", "tg-thumb"), 0), layers * heads)
    expect("head toggles", dom.classes.get(("button", "tg-head-toggle"), 0), heads)
    expect("layer menu entries", dom.layer_options, layers)
    expect("positions", dom.classes.get(("div", "tg-token"), 0), 2 * positions)
    if int(dom.body.get("data-lines") or 0) <= 0:
        problems.append("no lines drawn (data-lines %r)" % dom.body.get("data-lines"))
    # A view named in the address: the last layer, the last head, the last query's lines.
    named = dumped_dom(chromium, profile, "file://%s#layer=%d&heads=%d&focus=query:%d" % (
        page, layers - 1, heads - 1, positions - 1))
    expect("named view's status", named.body.get("data-status"), "ok")
    expect("named view's focused positions", named.classes.get(("div", "tg-focus"), 0), 1)
    wanted = "query %d " % (positions - 1)
    if not named.readout.startswith(wanted) or ("head %d:" % (heads - 1)) not in named.readout:
        problems.append("named view's readout %r, expected %r... head %d:" % (
            named.readout, wanted, heads - 1))
    if problems:
        sys.exit("%s in Chromium:\n  %s" % (name, "\n  ".join(problems)))
    return "%s: %d layers x %d heads, %d positions, %s lines, self-test ok, no script error" % (
        name, layers, heads, positions, dom.body.get("data-lines"))


def write_data(directory):
    """A pangram text, a two-class TSV and a 60-row sine series."""
    names = ("text.txt", "texts.tsv", "series.csv")
    paths = {name: os.path.join(directory, name) for name in names}
    with open(paths["text.txt"], "w") as out:
        out.write("the quick brown fox jumps over the lazy dog. " * 40)
    with open(paths["texts.tsv"], "w") as out:
        for i in range(20):
            out.write("pets\tthe cat sat on the mat\n" if i % 2 else "wild\ta wolf ran far\n")
    with open(paths["series.csv"], "w") as out:
        out.write("t,value\n")
        for i in range(60):
            out.write("%d,%.6f\n" % (i, math.sin(0.3 * i)))
    return paths


def build_pages(tapegrad, directory, paths):
    """Trains each model and writes its page: [(page, layers, heads, positions)]."""
    cases = [
        ("cls", ["--task", "textcls", "--tokenizer", "word", "--layers", "2", "--heads", "2",
                 "--dim", "8", "--data", paths["texts.tsv"]], ["--text", "the cat sat on a mat"],
         2, 2, 6),
        ("lm", ["--task", "charlm", "--context", "16", "--layers", "2", "--heads", "4", "--dim",
                "16", "--data", paths["text.txt"]], ["--text", "the lazy dog"], 2, 4, 12),
        ("ts", ["--task", "timeseries", "--window", "24", "--layers", "1", "--heads", "4",
                "--dim", "16", "--data", paths["series.csv"]], ["--data", paths["series.csv"]],
         1, 4, 24),
        ("linformer", ["--task", "textcls", "--tokenizer", "word", "--layers", "2", "--heads",
                       "2", "--dim", "8", "--max-len", "16", "--attention", "linformer:4",
                       "--data", paths["texts.tsv"]], ["--text", "a wolf sat"], 2, 2, 3),
    ]
    pages = []
    for name, train, plot, layers, heads, positions in cases:
        model = os.path.join(directory, name + ".st")
        page = os.path.join(directory, name + ".html")
        run([tapegrad, "train", *train, "--steps", "3", "--save", model, *TINY])
        run([tapegrad, "plot", "attention", "--load", model, *plot, "--html", page])
        pages.append((page, layers, heads, positions))
    return pages


def screenshot(tapegrad, chromium, profile, directory, target):
    """A char LM trained a little on data/corpus.txt, its page at 1200 x 800 as `target`."""
    model = os.path.join(directory, "corpus-lm.st")
    page = os.path.join(directory, "corpus-lm.html")
    corpus = os.path.join(SOURCE_DIR, "data/corpus.txt")
    run([tapegrad, "train", "--task", "charlm", "--data", corpus,
         "--context", "32", "--layers", "2", "--heads", "4", "--dim", "32", "--steps", "300",
         "--batch", "16", "--threads", "1", "--seed", "1", "--save", model], timeout=900)
    run([tapegrad, "plot", "attention", "--load", model, "--text", "the cat sat on the mat.",
         "--html", page])
    # The head view of layer 1 focused on query 21, the "t" of "mat": its lines and readout.
    run(chromium_command(chromium, profile, "--screenshot=" + os.path.abspath(target),
                         "--window-size=1200,800", "file://" + page + "#layer=1&focus=query:21"))
    print("wrote %s (%d bytes)" % (target, os.path.getsize(target)))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tapegrad", required=True, help="the tapegrad binary")
    parser.add_argument("--screenshot", help="also save a char LM's page as this PNG")
    args = parser.parse_args()
    chromium = find_chromium()
    if not chromium:
        print("skipped: no chromium on the PATH (Debian: apt-get install chromium; "
              "or set TAPEGRAD_CHROMIUM)")
        return 77
    with tempfile.TemporaryDirectory(prefix="tapegrad-viewer-") as directory:
        profile = os.path.join(directory, "profile")
        paths = write_data(directory)
        for page, layers, heads, positions in build_pages(args.tapegrad, directory, paths):
            print(check_page(chromium, profile, page, layers, heads, positions))
        if args.screenshot:
            screenshot(args.tapegrad, chromium, profile, directory, args.screenshot)
    return 0


if __name__ == "__main__":
    sys.exit(main())
