#!/usr/bin/env python3
"""dist-train linked with build/library_order.rsp against the same program without it.

    check_library_order.py NATURAL ORDERED

Runs `--help` of both under the dynamic loader's own report (LD_DEBUG=bindings,scopes) and
checks what cmake/library_order.py promises:
- both load the same libraries;
- every symbol binds to the library it binds to in NATURAL's order, except a symbol that both
  of its two binding libraries define weakly or as unique (the same C++ template, vtable or
  inline function's static, by the one-definition rule): malloc stays tcmalloc's, sgemm_
  OpenBLAS's;
- the loader's search is at most half as long: the sum, over the bindings, of how many
  libraries come before the one that defines the symbol (a count, not a time: the start-up
  time is bench/startup_time.sh's).
"""
import os
import re
import subprocess
import sys
import tempfile

BINDING = re.compile(r"binding file (\S+) \[0\] to (\S+) \[0\]: \S+ symbol `([^']+)'")


def loader_report(program, folder):
    """(the search order's library names, {(referrer, symbol): definer}) of PROGRAM --help."""
    prefix = os.path.join(folder, os.path.basename(program))
    env = dict(os.environ, LD_DEBUG="bindings,scopes", LD_DEBUG_OUTPUT=prefix)
    subprocess.run([program, "--help"], env=env, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL, check=True, timeout=120)
    reports = [os.path.join(folder, f) for f in os.listdir(folder)
               if f.startswith(os.path.basename(program) + ".")]
    if len(reports) != 1:
        sys.exit(f"expected one loader report of {program}, found {reports}")
    scope, bindings = None, {}
    executable = os.path.basename(program)
    with open(reports[0], encoding="utf-8", errors="replace") as report:
        for line in report:
            if scope is None and "scope 0:" in line:
                scope = [os.path.basename(p) for p in line.split("scope 0:")[1].split()]
                continue
            found = BINDING.search(line)
            if found:
                referrer, definer = (os.path.basename(found.group(i)) for i in (1, 2))
                # The program's own name differs between the two: call it "<program>".
                referrer = "<program>" if referrer == executable else referrer
                definer = "<program>" if definer == executable else definer
                bindings[(referrer, found.group(3))] = definer
    if scope is None or not bindings:
        sys.exit(f"the loader reported no scope or no binding for {program}")
    scope = ["<program>" if name == executable else name for name in scope]
    return scope, bindings


def weak_definitions(path_of, library):
    """The symbols LIBRARY defines weakly or as unique (versions stripped)."""
    table = subprocess.run(["readelf", "-W", "--dyn-syms", path_of[library]], check=True,
                           capture_output=True, text=True).stdout
    weak = set()
    for line in table.splitlines():
        fields = line.split()
        if len(fields) >= 8 and fields[4] in ("WEAK", "UNIQUE") and fields[6] != "UND":
            weak.add(fields[7].split("@")[0])
    return weak


def library_paths(program):
    listing = subprocess.run(["ldd", program], check=True, capture_output=True, text=True).stdout
    paths = {"<program>": program}
    for line in listing.splitlines():
        found = re.match(r"\s*(\S+) => (/\S+) \(", line)
        if found:
            paths[os.path.basename(found.group(2))] = found.group(2)
    return paths


def search_length(scope, bindings):
    position = {}
    for i, name in enumerate(scope):
        position.setdefault(name, i)
    return sum(position.get(definer, 0) for definer in bindings.values())


def main():
    natural, ordered = sys.argv[1], sys.argv[2]
    failures = []
    with tempfile.TemporaryDirectory() as folder:
        natural_scope, natural_bindings = loader_report(natural, folder)
        ordered_scope, ordered_bindings = loader_report(ordered, folder)
    if sorted(natural_scope) != sorted(ordered_scope):
        failures.append("the two load different libraries: only natural "
                        f"{sorted(set(natural_scope) - set(ordered_scope))}, only ordered "
                        f"{sorted(set(ordered_scope) - set(natural_scope))}")
    path_of = library_paths(natural)
    weak = {}

    def weakly_defined(library, symbol):
        if library not in weak:
            weak[library] = weak_definitions(path_of, library)
        return symbol.split("@")[0] in weak[library]

    moved = 0
    for (referrer, symbol), definer in natural_bindings.items():
        now = ordered_bindings.get((referrer, symbol))
        if now == definer:
            continue
        if now is not None and weakly_defined(definer, symbol) and weakly_defined(now, symbol):
            moved += 1
            continue
        failures.append(f"{referrer}: {symbol} binds to {now}, not {definer} as in the "
                        "natural order (a strong definition)")
    natural_length = search_length(natural_scope, natural_bindings)
    ordered_length = search_length(ordered_scope, ordered_bindings)
    print(f"{len(natural_bindings)} bindings, {moved} weak ones to another copy; the loader "
          f"searched {natural_length} libraries in the natural order, {ordered_length} ordered")
    if ordered_length * 2 > natural_length:
        failures.append(f"the ordered search ({ordered_length}) is not at most half the "
                        f"natural one ({natural_length})")
    for failure in failures[:20]:
        print("FAIL:", failure)
    if failures:
        print(f"{len(failures)} failure(s)")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
