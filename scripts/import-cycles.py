#!/usr/bin/env python3
"""Import circles between the modules of each crate: prints the strongly connected components
(more than one module) of the graph "file A names crate::B". A module is a file (or a folder's
mod.rs), keyed by its path under src/; `super::` and `crate::` references both count.

    scripts/import-cycles.py            # all crates; exit code 1 when a circle exists
"""
import os, re, sys

def modules(src):
    mods = {}
    for dp, _, fs in os.walk(src):
        for f in fs:
            if f.endswith('.rs'):
                p = os.path.join(dp, f)
                rel = os.path.relpath(p, src)[:-3].split(os.sep)
                if rel[-1] in ('mod', 'lib', 'main'):
                    rel = rel[:-1]
                if 'tests' in rel or rel[-1:] == ['testutil']:
                    continue
                mods[tuple(rel)] = p
    return mods

def edges(mods):
    out = {m: set() for m in mods}
    for m, p in mods.items():
        text = open(p).read()
        text = re.sub(r'#\[cfg\(test\)\]\s*mod tests \{.*', '', text, flags=re.S)
        text = re.sub(r'//[^\n]*', '', text)
        for mt in re.finditer(r'\b(crate|super)((?:::\w+)+)', text):
            segs = mt.group(2).split('::')[1:]
            # `super` from `a/b.rs` is `a`; from `a/mod.rs` it is the crate root: both `m[:-1]`.
            base = [] if mt.group(1) == 'crate' else list(m[:-1])
            full = base + segs
            for k in range(len(full), 0, -1):
                t = tuple(full[:k])
                if t in mods:
                    if t != m and not (m[:len(t)] == t):
                        out[m].add(t)
                    break
        # `use {a, b}` groups: crate::{x::Y, z}
        for mt in re.finditer(r'\bcrate::\{([^}]*)\}', text):
            for part in mt.group(1).split(','):
                segs = part.strip().split('::')
                if segs and segs[0] and (segs[0],) in mods and (segs[0],) != m[:1]:
                    out[m].add((segs[0],))
    return out

def sccs(graph):
    index, low, stack, on, res = {}, {}, [], set(), []
    counter = [0]
    sys.setrecursionlimit(10000)
    def visit(v):
        index[v] = low[v] = counter[0]; counter[0] += 1
        stack.append(v); on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w); low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop(); on.discard(w); comp.append(w)
                if w == v: break
            res.append(comp)
    for v in graph:
        if v not in index:
            visit(v)
    return [c for c in res if len(c) > 1]

def main():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    bad = 0
    for crate in ['catalog', 'core', 'macros', 'cuda', '.']:
        src = os.path.join(root, crate, 'src')
        mods = modules(src)
        g = edges(mods)
        # Circles between sibling subtrees: fold each module to its top-level ancestor in a
        # second pass, where parent-child references (a folder and its files) do not count.
        top = {}
        for m, ts in g.items():
            a = m[:1]
            top.setdefault(a, set()).update(t[:1] for t in ts if t[:1] != a)
        for name, graph in (('module', g), ('top-level', top)):
            for comp in sccs(graph):
                bad += 1
                print(f"{crate}: {name} circle: " + ' -> '.join('::'.join(c) or 'crate' for c in comp))
    print('no import circles' if not bad else f'{bad} circle(s)')
    return 1 if bad else 0

if __name__ == '__main__':
    sys.exit(main())
