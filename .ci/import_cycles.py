#!/usr/bin/env python3
"""Fail when modules of a crate import each other in a circle.

Each `.rs` file is one node. An edge A -> B means A names an item that is
defined in B: through `use crate::...`, `super::...`, `self::...`, a path
written inline, or a child module named by its parent (`simd::Isa`). Paths
through the crate root's re-exports resolve to the module that defines the
item. A parent merely declaring `mod child;` is not an edge.

usage: import_cycles.py <crate/src> [...]
"""
import os
import re
import sys


def modules(src):
    """Map module path tuples to file paths."""
    mods = {}
    for root, _, files in os.walk(src):
        for f in files:
            if not f.endswith(".rs"):
                continue
            rel = os.path.relpath(os.path.join(root, f), src)[:-3].split(os.sep)
            if rel == ["lib"] or rel == ["main"]:
                rel = []
            elif rel[-1] == "mod":
                rel = rel[:-1]
            mods[tuple(rel)] = os.path.join(root, f)
    return mods


def strip(text):
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    text = re.sub(r"//[^\n]*", "", text)
    text = re.sub(r'"(\\.|[^"\\])*"', '""', text)
    return text


def cfg_test_free(text):
    """Drop `#[cfg(test)] mod ... { ... }` blocks: unit tests may look anywhere."""
    out, i = [], 0
    for m in re.finditer(r"#\[cfg\(test\)\]\s*(pub(\([^)]*\))?\s+)?mod\s+\w+\s*\{", text):
        if m.start() < i:
            continue
        out.append(text[i:m.start()])
        depth, j = 1, m.end()
        while j < len(text) and depth:
            depth += {"{": 1, "}": -1}.get(text[j], 0)
            j += 1
        i = j
    out.append(text[i:])
    return "".join(out)


def inline_modules(here, text):
    """The file's own text and each inline `mod name { ... }`, with the module
    path each is written in (so that `super::` inside one means this file)."""
    out, i, rest = [], 0, []
    for m in re.finditer(r"\bmod\s+(\w+)\s*\{", text):
        if m.start() < i:
            continue
        rest.append(text[i:m.start()])
        depth, j = 1, m.end()
        while j < len(text) and depth:
            depth += {"{": 1, "}": -1}.get(text[j], 0)
            j += 1
        out += inline_modules(here + (m.group(1),), text[m.end():j - 1])
        i = j
    rest.append(text[i:])
    return [(here, "".join(rest))] + out


def expand_uses(text):
    """Yield the full paths named by `use` trees and inline paths."""
    paths = []
    for m in re.finditer(r"\buse\s+([^;]+);", text):
        paths += flatten(m.group(1).replace("\n", " "))
    for m in re.finditer(r"\b((?:crate|super|self)(?:::\w+)+)", text):
        paths.append(m.group(1))
    return paths


def flatten(tree, prefix=""):
    tree = tree.strip()
    m = re.match(r"^(.*?)::\s*\{(.*)\}$", tree, flags=re.S)
    if not m:
        return [prefix + re.sub(r"\s+as\s+\w+$", "", tree)]
    head, body = m.group(1), m.group(2)
    parts, depth, cur = [], 0, ""
    for ch in body:
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
            continue
        depth += {"{": 1, "}": -1}.get(ch, 0)
        cur += ch
    parts.append(cur)
    out = []
    for p in parts:
        if p.strip():
            out += flatten(p, prefix + head.strip() + "::")
    return out


def main():
    bad = False
    for src in sys.argv[1:]:
        mods = modules(src)
        texts = {m: cfg_test_free(strip(open(p).read())) for m, p in mods.items()}
        reexports = {m: module_reexports(t) for m, t in texts.items()}
        edges = {m: set() for m in mods}
        for m, text in texts.items():
            for here, part in inline_modules(m, text):
                for path in expand_uses(part):
                    target = resolve(path, here, mods, reexports)
                    if target is not None and target != m and target != ():
                        edges[m].add(target)
            for child in child_uses(text, m, mods):
                edges[m].add(child)
        cycles = find_cycles(edges)
        for cyc in cycles:
            bad = True
            names = [mods[c].replace(src.rstrip("/") + "/", "") for c in cyc]
            print(f"{src}: import circle: " + " -> ".join(names + names[:1]))
    if not bad:
        print("no import circles")
    return 1 if bad else 0


def module_reexports(text):
    """Names a module re-exports (`pub use`, `pub(crate) use`), as the paths they name."""
    table = {}
    for m in re.finditer(r"\bpub(?:\([^)]*\))?\s+use\s+([^;]+);", text):
        for p in flatten(m.group(1).replace("\n", " ")):
            parts = [x for x in p.split("::") if x]
            alias = re.search(r"\s+as\s+(\w+)$", m.group(1))
            table[parts[-1]] = "::".join(parts)
    return table


def resolve(path, here, mods, reexports, depth=0):
    parts = [p for p in path.split("::") if p]
    if not parts:
        return None
    if parts[0] == "crate":
        base, rest = (), parts[1:]
    elif parts[0] in ("super", "self"):
        base = list(here)
        while parts and parts[0] in ("super", "self"):
            if parts[0] == "super":
                base = base[:-1]
            parts = parts[1:]
        base, rest = tuple(base), parts
    else:
        return None
    if not rest:
        return base if base in mods else None
    return follow(base + tuple(rest), mods, reexports, depth)


def follow(path, mods, reexports, depth):
    """The module defining `path`, through re-exports of the module it names."""
    target = longest(path, mods)
    if target is None or depth > 8:
        return target
    rest = path[len(target):]
    if rest and rest[0] in reexports.get(target, {}) and target + rest[:1] not in mods:
        again = resolve(reexports[target][rest[0]], target, mods, reexports, depth + 1)
        if again is not None:
            return again
    return target


def longest(path, mods):
    for n in range(len(path), -1, -1):
        if tuple(path[:n]) in mods:
            return tuple(path[:n])
    return None


def child_uses(text, here, mods):
    """A parent naming `child::item` depends on the child."""
    kids = [m for m in mods if len(m) == len(here) + 1 and m[:-1] == here]
    out = []
    for k in kids:
        if re.search(r"(?<![:\w])" + re.escape(k[-1]) + r"::\w", text):
            out.append(k)
    return out


def find_cycles(edges):
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def strong(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(edges[v]):
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in sorted(edges):
        if v not in index:
            strong(v)
    return out


if __name__ == "__main__":
    sys.exit(main())
