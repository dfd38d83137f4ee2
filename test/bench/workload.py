# SPDX-License-Identifier: MIT
"""python3 workload of the benchmark (scripts/bench.sh): builds dicts, lists
and strings, does json round trips and exercises a small class hierarchy.
Deterministic: prints the same CHECKSUM line on every run (no hash-order
dependence).  usage: python3 workload.py [SHAPES]   (default 30000: five
rounds of 6000 shapes; a smaller SHAPES makes one smaller round)"""

import json
import sys
import zlib


class Shape:
    def __init__(self, ident, name):
        self.ident = ident
        self.name = name
        self.tags = [name[:3], str(ident % 7)]

    def area(self):
        return 0

    def describe(self):
        return f"{type(self).__name__}#{self.ident}:{self.name}:{self.area()}"


class Rect(Shape):
    def __init__(self, ident, w, h):
        super().__init__(ident, f"rect{w}x{h}")
        self.w, self.h = w, h

    def area(self):
        return self.w * self.h


class Square(Rect):
    def __init__(self, ident, side):
        super().__init__(ident, side, side)
        self.name = f"square{side}"


class Circle(Shape):
    def __init__(self, ident, r):
        super().__init__(ident, f"circle{r}")
        self.r = r

    def area(self):
        return 314 * self.r * self.r // 100


def make_shapes(n, seed):
    shapes = []
    x = seed
    for i in range(n):
        x = (x * 1103515245 + 12345) & 0x7FFFFFFF
        kind = x % 3
        if kind == 0:
            shapes.append(Rect(i, x % 50 + 1, x % 37 + 1))
        elif kind == 1:
            shapes.append(Square(i, x % 29 + 1))
        else:
            shapes.append(Circle(i, x % 17 + 1))
    return shapes


def one_round(r, n):
    crc = 0
    shapes = make_shapes(n, r + 1)
    # dicts and lists keyed by strings
    index = {}
    for s in shapes:
        index.setdefault(s.name, []).append(s.ident)
    by_area = sorted(shapes, key=lambda s: (s.area(), s.ident))
    text = "\n".join(s.describe() for s in by_area)
    crc = zlib.crc32(text.encode(), crc)
    # json round trips of nested structures
    doc = {
        "round": r,
        "groups": [{"name": k, "ids": v, "n": len(v)} for k, v in index.items()],
        "shapes": [{"id": s.ident, "kind": type(s).__name__, "area": s.area(),
                    "tags": s.tags} for s in shapes],
    }
    for _ in range(3):
        doc = json.loads(json.dumps(doc, sort_keys=True))
    crc = zlib.crc32(json.dumps(doc, sort_keys=True).encode(), crc)
    # string building and splitting
    words = [f"w{i % 977}_{(i * 31) % 1013}" for i in range(n * 10 // 3)]
    counts = {}
    for w in " ".join(words).split():
        counts[w] = counts.get(w, 0) + 1
    crc = zlib.crc32(repr(sorted(counts.items())[:500]).encode(), crc)
    # list of tuples, slices, comprehensions
    pairs = [(i, str(i) * (i % 5 + 1)) for i in range(n * 5)]
    pairs = [p for p in pairs if p[0] % 3] + pairs[::7]
    crc = zlib.crc32(str(len(pairs)).encode() + pairs[-1][1].encode(), crc)
    return crc


def main():
    shapes = int(sys.argv[1]) if len(sys.argv) > 1 else 30000
    rounds = max(1, (shapes + 5999) // 6000)
    total = 0
    for r in range(rounds):
        total = zlib.crc32(one_round(r, shapes // rounds).to_bytes(4, "little"), total)
    print(f"rounds {rounds} of {shapes // rounds} shapes")
    print(f"CHECKSUM {total:08x}")


if __name__ == "__main__":
    main()
