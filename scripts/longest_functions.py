#!/usr/bin/env python3
# Usage: scripts/longest_functions.py src tools   (TOP=20 for more)
# Longest function definitions in .cc files: a definition is a statement that starts with an
# identifier, contains '(' and ends with '{' on its last line; it ends at the next line that is
# the start line's indent followed by '}'. Lambdas and control blocks are not counted.
import re, sys, os
KEYWORDS = ('namespace', 'struct', 'class', 'enum', 'union', 'extern', 'if', 'for', 'while',
            'switch', 'else', 'do', 'try', 'catch', 'return', 'case', 'template')
results = []
for root in sys.argv[1:]:
    for dirpath, _, files in os.walk(root):
        for f in files:
            if not f.endswith('.cc'): continue
            p = os.path.join(dirpath, f)
            lines = open(p).read().split('\n')
            i = 0
            while i < len(lines):
                l = lines[i]
                if l.rstrip().endswith('{') and not l.strip().startswith('//'):
                    s = i
                    while s > 0 and lines[s-1].strip() and not lines[s-1].rstrip().endswith((';', '}', '{', ':')) \
                            and not lines[s-1].strip().startswith(('//', '#')):
                        s -= 1
                    head = lines[s]
                    indent = len(head) - len(head.lstrip())
                    first = head.strip().split('(')[0].split(' ')[0]
                    sig = ' '.join(x.strip() for x in lines[s:i+1])
                    if '(' in sig and first not in KEYWORDS and not first.startswith(('[', '}', '{', ')')) \
                            and '=' not in sig.split('(')[0] and ' : ' not in sig.split('(')[0] and indent <= 2:
                        j = i + 1
                        while j < len(lines) and lines[j] != ' ' * indent + '}':
                            j += 1
                        if j < len(lines):
                            results.append((j - s + 1, p, s + 1, head.strip()[:70]))
                            i = j
                i += 1
results.sort(reverse=True)
for r in results[:int(os.environ.get('TOP', '10'))]:
    print(f"{r[0]:5d} {r[1]}:{r[2]} {r[3]}")
