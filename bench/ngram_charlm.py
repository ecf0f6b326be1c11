#!/usr/bin/env python3
"""Character trigram count models on `tapegrad train --task charlm`'s validation split.

The yardstick for the char-LM defaults: a transformer that cannot beat counting triples of
characters has learned nothing a table could not. Python 3 standard library only.

The split is tapegrad's (train/datasets.cpp): the file's UTF-8 characters (a byte that starts no
well-formed sequence is a character of its own), the last floor(n * val_frac) of them for
validation. The scored positions are exactly those of tapegrad's validation loss: window i is
val[i*C, i*C + C + 1), each of its C targets predicted from the characters before it in the same
window (so the first target of a window has one character of context, as the transformer has).

Three smoothings, each with its parameter picked on this very validation split (the most
favourable choice for the count model):
  add-k       P(c | ab) = (N(abc) + k) / (N(ab) + k V)
  interpolated  l3 P(c | ab) + l2 P(c | b) + (1 - l3 - l2) P_add-k(c); an unseen context gives its
              weight to the orders below
  Kneser-Ney  interpolated, one absolute discount D for the trigram and bigram orders, continuation
              counts for the lower orders
Prints the mean cross-entropy in nats per character, tapegrad's `val loss` unit.

  python3 bench/ngram_charlm.py data/corpus.txt [--context 64] [--val-frac 0.1]
"""
import argparse
import math
from collections import Counter, defaultdict


def characters(data):
    """The characters of a file as train/datasets.cpp splits them (bad bytes one at a time)."""
    text = data[3:] if data.startswith(b"\xef\xbb\xbf") else data  # a byte-order mark is skipped
    chars = []
    for part in text.decode("utf-8", errors="surrogateescape"):
        if 0xDC80 <= ord(part) <= 0xDCFF:  # one byte that is not well-formed UTF-8
            chars.append(bytes([ord(part) - 0xDC00]))
        else:
            chars.append(part)
    return chars


def scored_positions(val, context):
    """(history, target) for every target of tapegrad's validation windows, history <= 2 chars."""
    windows = (len(val) - 1) // context if len(val) - 1 >= context else 0
    pairs = []
    for w in range(windows):
        start = w * context
        for j in range(context):
            history = tuple(val[max(start, start + j - 1): start + j + 1])
            pairs.append((history, val[start + j + 1]))
    return pairs


class Counts:
    """Trigram, bigram and unigram counts of the training characters."""

    def __init__(self, train):
        self.vocab = sorted(set(train), key=str)
        self.uni = Counter(train)
        self.bi = Counter(zip(train, train[1:]))
        self.tri = Counter(zip(train, train[1:], train[2:]))
        self.bi_context = Counter(train[:-1])          # N(b .)
        self.tri_context = Counter(zip(train, train[1:-1]))  # N(ab .)
        self.total = len(train)


def add_k_unigram(counts, c, k):
    """Add-k unigram probability over the training vocabulary (an unseen character gets k)."""
    return (counts.uni[c] + k) / (counts.total + k * len(counts.vocab))


def add_k_trigram(counts, history, c, k):
    """Add-k on the longest history available (two characters, or one at a window's start)."""
    if len(history) == 2:
        seen = counts.tri_context[history]
        return (counts.tri[history + (c,)] + k) / (seen + k * len(counts.vocab))
    return (counts.bi[history + (c,)] + k) / (counts.bi_context[history[0]] + k * len(counts.vocab))


def interpolated(counts, history, c, l3, l2, k):
    """Linear interpolation of maximum-likelihood trigram, bigram and add-k unigram."""
    p1 = add_k_unigram(counts, c, k)
    b = history[-1]
    n_b = counts.bi_context[b]
    p2 = counts.bi[(b, c)] / n_b if n_b else None
    p3 = None
    if len(history) == 2 and counts.tri_context[history]:
        p3 = counts.tri[history + (c,)] / counts.tri_context[history]
    if p2 is None:
        return p1
    if p3 is None:
        w2 = l2 / (1 - l3)  # the trigram's weight goes to the orders below, in proportion
        return w2 * p2 + (1 - w2) * p1
    return l3 * p3 + l2 * p2 + (1 - l3 - l2) * p1


class KneserNey:
    """Interpolated Kneser-Ney with one discount for both higher orders."""

    def __init__(self, counts):
        self.counts = counts
        self.continuation = Counter(c for (_, c) in counts.bi)  # N(. c): distinct left neighbours
        self.bigram_types = len(counts.bi)
        self.continuation_bi = Counter((b, c) for (_, b, c) in counts.tri)  # N(. b c)
        self.continuation_bi_context = Counter(b for (_, b, _) in counts.tri)  # N(. b .)
        self.followers_bi = Counter(b for (b, _) in self.continuation_bi)  # c with N(. b c) > 0
        self.followers_tri = Counter((a, b) for (a, b, _) in counts.tri)  # N(ab c) > 0 types
        self.uniform = 1.0 / len(counts.vocab)

    def unigram(self, c):
        return 0.9999 * self.continuation[c] / self.bigram_types + 0.0001 * self.uniform

    def bigram(self, b, c, d):
        total = self.continuation_bi_context[b]
        if not total:
            return self.unigram(c)
        seen = max(self.continuation_bi[(b, c)] - d, 0) / total
        return seen + d * self.followers_bi[b] / total * self.unigram(c)

    def prob(self, history, c, d):
        b = history[-1]
        if len(history) < 2 or not self.counts.tri_context[history]:
            return self.bigram(b, c, d)
        total = self.counts.tri_context[history]
        seen = max(self.counts.tri[history + (c,)] - d, 0) / total
        return seen + d * self.followers_tri[history] / total * self.bigram(b, c, d)


def cross_entropy(pairs, prob):
    """Mean -log p over the scored positions, in nats."""
    return -sum(math.log(prob(h, c)) for h, c in pairs) / len(pairs)


def best(pairs, grid, prob):
    """(loss, setting) of the grid's best setting."""
    return min((cross_entropy(pairs, lambda h, c: prob(h, c, *s)), s) for s in grid)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("data")
    parser.add_argument("--context", type=int, default=64)
    parser.add_argument("--val-frac", type=float, default=0.1)
    args = parser.parse_args()
    with open(args.data, "rb") as f:
        chars = characters(f.read())
    val_count = math.floor(len(chars) * args.val_frac + 1e-9)
    train, val = chars[: len(chars) - val_count], chars[len(chars) - val_count:]
    counts = Counts(train)
    pairs = scored_positions(val, args.context)
    print(f"{len(train)} training and {len(val)} validation characters, vocabulary "
          f"{len(counts.vocab)}, {len(pairs)} scored positions (context {args.context})")
    ks = [0.001, 0.003, 0.01, 0.03, 0.1, 0.3, 1.0]
    loss, (k,) = best(pairs, [(k,) for k in ks], lambda h, c, k: add_k_trigram(counts, h, c, k))
    print(f"add-k trigram        {loss:.4f} nats/char  (k {k})")
    grid = [(l3 / 20, l2 / 20, 0.01) for l3 in range(1, 20) for l2 in range(1, 20 - l3)]
    loss, setting = best(pairs, grid, lambda h, c, l3, l2, k: interpolated(counts, h, c, l3, l2, k))
    print(f"interpolated trigram {loss:.4f} nats/char  (l3 {setting[0]:.2f}, l2 {setting[1]:.2f})")
    kn = KneserNey(counts)
    loss, (d,) = best(pairs, [(d / 20,) for d in range(2, 20)], lambda h, c, d: kn.prob(h, c, d))
    print(f"Kneser-Ney trigram   {loss:.4f} nats/char  (discount {d:.2f})")


if __name__ == "__main__":
    main()
