#!/usr/bin/env python3
# Checks an HTML report as headless Chromium rendered it: its DOM (charts and
# their marks) and its screenshot (the charts' colours were painted).
# usage: report_check.py dom DUMPED_DOM SPEC_JSON
#        report_check.py table DUMPED_DOM TEXT_TABLE
#        report_check.py png SCREENSHOT COLOUR:MIN_PIXELS...
# SPEC_JSON maps each chart id to what it must hold:
#   {"ttft-cdf": {"path": 4, "text": ["kvmesh"]}, "hit-ratio": {"rect_min": 3}}
# "path"/"rect": exact counts of elements of class "mark"; "*_min": at least;
# "text": strings among the chart's texts. A chart that says "no data"
# fails. `table` compares the page's results table with the text table the
# command printed, row by row. Exit status 1 names every check that failed.
import json
import struct
import sys
import zlib
from html.parser import HTMLParser


class Charts(HTMLParser):
    """Marks, texts and "no data" notes per <svg id=...>."""

    def __init__(self):
        super().__init__()
        self.charts = {}
        self.current = None

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        classes = (a.get("class") or "").split()
        if tag == "svg":
            self.current = a.get("id")
            self.charts[self.current] = {"marks": {}, "texts": [],
                                         "no_data": 0}
        elif self.current is not None:
            chart = self.charts[self.current]
            if "mark" in classes:
                chart["marks"][tag] = chart["marks"].get(tag, 0) + 1
            if "no-data" in classes:
                chart["no_data"] += 1

    def handle_endtag(self, tag):
        if tag == "svg":
            self.current = None

    def handle_data(self, data):
        if self.current is not None and data.strip():
            self.charts[self.current]["texts"].append(data.strip())


def check_dom(dom_path, spec):
    parser = Charts()
    parser.feed(open(dom_path, encoding="utf-8").read())
    problems = []
    for chart_id, want in spec.items():
        chart = parser.charts.get(chart_id)
        if chart is None:
            problems.append(f"{chart_id}: no <svg> with this id")
            continue
        if chart["no_data"]:
            problems.append(f"{chart_id}: says no data")
        for key, value in want.items():
            if key == "text":
                for t in value:
                    if t not in chart["texts"]:
                        problems.append(f"{chart_id}: no text '{t}'")
                continue
            tag, _, bound = key.partition("_")
            got = chart["marks"].get(tag, 0)
            if (bound == "min" and got < value) or (not bound and got != value):
                problems.append(f"{chart_id}: {got} {tag} marks, want "
                                f"{'at least ' if bound else ''}{value}")
    return problems


class Results(HTMLParser):
    """The cells of <table class="results">, row by row."""

    def __init__(self):
        super().__init__()
        self.rows = []
        self.inside = False
        self.cell = None

    def handle_starttag(self, tag, attrs):
        if tag == "table":
            self.inside = "results" in (dict(attrs).get("class") or "")
        elif self.inside and tag == "tr":
            self.rows.append([])
        elif self.inside and tag in ("td", "th"):
            self.cell = ""

    def handle_endtag(self, tag):
        if tag == "table":
            self.inside = False
        elif self.inside and tag in ("td", "th") and self.cell is not None:
            self.rows[-1].append(self.cell.strip())
            self.cell = None

    def handle_data(self, data):
        if self.cell is not None:
            self.cell += data


def check_table(dom_path, text_path):
    parser = Results()
    parser.feed(open(dom_path, encoding="utf-8").read())
    # The oracle's row ends early in the text; the page pads it.
    page = [[c for c in row if c] for row in parser.rows]
    text = [line.split() for line in open(text_path) if line.strip()]
    if not page:
        return ["no results table in the page"]
    if page != text:
        return [f"page rows {page} differ from the text table {text}"]
    return []


def png_pixels(path):
    """(r, g, b) per pixel of an 8-bit, non-interlaced RGB(A) PNG."""
    data = open(path, "rb").read()
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        raise ValueError(f"{path}: not a PNG")
    pos, idat = 8, b""
    while pos < len(data):
        n, = struct.unpack(">I", data[pos:pos + 4])
        kind, body = data[pos + 4:pos + 8], data[pos + 8:pos + 8 + n]
        pos += 12 + n
        if kind == b"IHDR":
            w, h, depth, ctype, _, _, interlace = struct.unpack(">IIBBBBB",
                                                               body)
        elif kind == b"IDAT":
            idat += body
    if depth != 8 or interlace != 0 or ctype not in (2, 6):
        raise ValueError(f"{path}: PNG depth {depth}, colour type {ctype}, "
                         f"interlace {interlace}: not decoded here")
    bpp = 3 if ctype == 2 else 4
    raw = zlib.decompress(idat)
    stride = w * bpp
    prev = bytearray(stride)
    i = 0
    for _ in range(h):
        f, line = raw[i], bytearray(raw[i + 1:i + 1 + stride])
        i += 1 + stride
        if f == 1:
            for x in range(bpp, stride):
                line[x] = (line[x] + line[x - bpp]) & 255
        elif f == 2:
            line = bytearray((a + b) & 255 for a, b in zip(line, prev))
        elif f in (3, 4):
            for x in range(stride):
                a = line[x - bpp] if x >= bpp else 0
                b = prev[x]
                if f == 3:
                    line[x] = (line[x] + ((a + b) >> 1)) & 255
                    continue
                c = prev[x - bpp] if x >= bpp else 0
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                pred = a if pa <= pb and pa <= pc else b if pb <= pc else c
                line[x] = (line[x] + pred) & 255
        for x in range(0, stride, bpp):
            yield line[x], line[x + 1], line[x + 2]
        prev = line


def check_png(path, wants):
    counts = {}
    total = blank = 0
    for px in png_pixels(path):
        total += 1
        blank += px == (255, 255, 255)
        counts[px] = counts.get(px, 0) + 1
    problems = []
    if total == 0 or blank > 0.98 * total:
        problems.append(f"{path}: {blank} of {total} pixels are white")
    for want in wants:
        colour, _, least = want.partition(":")
        rgb = tuple(int(colour.lstrip("#")[k:k + 2], 16) for k in (0, 2, 4))
        got = counts.get(rgb, 0)
        if got < int(least):
            problems.append(f"{path}: {got} pixels of {colour}, want at "
                            f"least {least}")
    return problems


def main():
    if len(sys.argv) >= 4 and sys.argv[1] == "dom":
        problems = check_dom(sys.argv[2], json.loads(sys.argv[3]))
    elif len(sys.argv) == 4 and sys.argv[1] == "table":
        problems = check_table(sys.argv[2], sys.argv[3])
    elif len(sys.argv) >= 3 and sys.argv[1] == "png":
        problems = check_png(sys.argv[2], sys.argv[3:])
    else:
        print("usage: report_check.py dom DUMP SPEC_JSON | table DUMP TEXT "
              "| png SCREENSHOT COLOUR:MIN_PIXELS...", file=sys.stderr)
        return 2
    for p in problems:
        print(p)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
