#!/usr/bin/env python3
"""Writes the linker arguments that list an executable's shared libraries in a faster order.

    library_order.py EXECUTABLE OUTPUT.rsp

A process linked with LibTorch loads about 340 shared libraries (Debian's LibTorch pulls in
OpenCV, GDAL, FFmpeg, Qt), and the dynamic loader resolves each of their ~150,000 symbol
references by searching the libraries in load order until one defines the symbol. The
libraries that define the most symbols (LibTorch itself, OpenBLAS, GDAL, Xerces) come late in
that order, so a start searched 17 million libraries and the search was a quarter of the 0.37 s
of CPU every process of LibTorch costs (perf, LD_DEBUG=bindings; docs/design.md, "The order
the libraries load in"). Listing the libraries that define the most first cuts it to about 5
million.

The order must not change which library a symbol binds to where that matters: when two
libraries define the same symbol and either defines it strongly (GLOBAL: malloc in tcmalloc and
the C library, sgemm_ in OpenBLAS and LAPACK), the one that comes first in EXECUTABLE's own load
order stays first. Only symbols that every definer defines weakly or as unique (C++ templates,
inline functions and their static variables, vtables: the same code by the one-definition
rule, one copy a process) may bind to another copy.

EXECUTABLE is linked without the list: its load order (ldd's) is the one to keep.
"""
import heapq
import re
import subprocess
import sys

# Defined by the linker in every object; never looked up by another library.
LINKER_SYMBOLS = {"_init", "_fini", "_edata", "_end", "__bss_start", "__end__", "_etext",
                  "__data_start", "data_start"}


def load_order(executable):
    """The shared libraries EXECUTABLE loads, in the order the loader searches them."""
    listing = subprocess.run(["ldd", executable], check=True, capture_output=True,
                             text=True).stdout
    paths = []
    for line in listing.splitlines():
        found = re.match(r"\s*\S+ => (/\S+) \(", line)
        if found and found.group(1) not in paths:
            paths.append(found.group(1))
    if not paths:
        sys.exit(f"library_order.py: ldd lists no shared library of {executable}")
    return paths


def defined_symbols(library):
    """(every symbol LIBRARY exports, those it defines strongly), versions stripped.

    Weak (WEAK) and unique (UNIQUE: a static variable of an inline function) definitions are
    the C++ one-definition rule's: any copy serves.
    """
    table = subprocess.run(["readelf", "-W", "--dyn-syms", library], check=True,
                           capture_output=True, text=True).stdout
    every, strong = set(), set()
    for line in table.splitlines():
        fields = line.split()
        # Num: Value Size Type Bind Vis Ndx Name
        if len(fields) < 8 or fields[4] not in ("GLOBAL", "WEAK", "UNIQUE") or fields[6] in (
                "UND", "ABS"):
            continue
        name = fields[7].split("@")[0]
        if name in LINKER_SYMBOLS:
            continue
        every.add(name)
        if fields[4] == "GLOBAL":
            strong.add(name)
    return every, strong


def must_precede(paths, symbols):
    """For each library, the libraries that must stay before it (they share a strong symbol)."""
    before = {path: set() for path in paths}
    definers = {}
    for path in paths:
        every, strong = symbols[path]
        for name in every:
            for earlier in definers.get(name, ()):
                if name in strong or name in symbols[earlier][1]:
                    before[path].add(earlier)
            definers.setdefault(name, []).append(path)
    return before


def faster_order(paths, symbols):
    """The libraries that define the most symbols first, within must_precede's constraints.

    A library that must precede a large one takes that one's rank, so tcmalloc (few symbols,
    before the C library) comes as early as the C library would.
    """
    before = must_precede(paths, symbols)
    after = {path: [] for path in paths}
    for path, earlier in before.items():
        for other in earlier:
            after[other].append(path)
    rank = {path: len(symbols[path][0]) for path in paths}
    for path in reversed(paths):  # everything a library must precede comes later in `paths`
        for later in after[path]:
            rank[path] = max(rank[path], rank[later])
    position = {path: i for i, path in enumerate(paths)}
    waiting = {path: len(before[path]) for path in paths}

    def entry(path):
        return (-rank[path], -len(symbols[path][0]), position[path], path)

    ready = [entry(path) for path in paths if waiting[path] == 0]
    heapq.heapify(ready)
    order = []
    while ready:
        path = heapq.heappop(ready)[-1]
        order.append(path)
        for later in after[path]:
            waiting[later] -= 1
            if waiting[later] == 0:
                heapq.heappush(ready, entry(later))
    assert len(order) == len(paths), "the constraints of must_precede formed a circle"
    return order


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    executable, output = sys.argv[1], sys.argv[2]
    paths = load_order(executable)
    symbols = {path: defined_symbols(path) for path in paths}
    order = faster_order(paths, symbols)
    # Before the objects on the link line, so they become the first DT_NEEDED entries; kept
    # even where --as-needed is on, since nothing in the objects refers to most of them.
    lines = ["-Wl,--push-state,--no-as-needed"] + order + ["-Wl,--pop-state"]
    with open(output, "w", encoding="utf-8") as out:
        out.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
