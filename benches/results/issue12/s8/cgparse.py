#!/usr/bin/env python3
"""Parse a callgrind out file: total Ir, exclusive Ir per function, calls into allocators."""
import sys, re, collections, json

ALLOC = {"__rdl_alloc", "__rdl_realloc", "__rdl_alloc_zeroed"}

def parse(path):
    names = {}
    excl = collections.Counter()
    calls_to = collections.Counter()        # callee -> calls
    alloc_callers = collections.Counter()   # caller -> alloc calls
    total = None
    edges = collections.defaultdict(lambda: [0, 0])
    pending_edge = None
    fn = None
    cfn = None
    after_calls = False
    def resolve(s):
        m = re.match(r"\((\d+)\)(?:\s+(.*))?", s)
        if m:
            i, n = m.group(1), m.group(2)
            if n is not None:
                names[i] = n
            return names.get(i, i)
        return s
    with open(path, errors="replace") as f:
        for line in f:
            line = line.rstrip("\n")
            if not line:
                continue
            c = line[0]
            if c.isdigit() or c in "+-*":
                if after_calls:
                    after_calls = False
                    parts = line.split()
                    if len(parts) >= 2:
                        edges[pending_edge][1] += int(parts[1])
                    continue
                parts = line.split()
                if len(parts) >= 2 and fn is not None:
                    excl[fn] += int(parts[1])
                continue
            if line.startswith("fn="):
                fn = resolve(line[3:]); continue
            if line.startswith("cfn="):
                cfn = resolve(line[4:]); continue
            if line.startswith("calls="):
                n = int(line[6:].split()[0])
                calls_to[cfn] += n
                if cfn and cfn.split("::")[-1] in ("__rust_alloc", "__rust_realloc", "__rust_alloc_zeroed"):
                    alloc_callers[fn] += n
                edges[(fn, cfn)][0] += n
                pending_edge = (fn, cfn)
                after_calls = True
                continue
            if line.startswith("totals:") or line.startswith("summary:"):
                total = int(line.split()[1])
    allocs = sum(v for k, v in calls_to.items() if k and k.split('::')[-1] in ALLOC)
    return dict(edges=edges, total=total, excl=excl, allocs=allocs, alloc_callers=alloc_callers, calls=calls_to)

def edges_of(a, b, pat, n, callers=True):
    keys = set(a['edges']) | set(b['edges'])
    rows = []
    for k in keys:
        caller, callee = k
        tgt = callee if callers else caller
        if tgt and pat in tgt:
            ea, eb = a['edges'].get(k, [0, 0]), b['edges'].get(k, [0, 0])
            rows.append(((eb[0]-ea[0])/n, (eb[1]-ea[1])/n, caller, callee))
    for calls, incl, caller, callee in sorted(rows, key=lambda r: -abs(r[1])):
        if abs(calls) >= 0.005 or abs(incl) >= 0.5:
            print(f"{calls:7.2f} calls {incl:9.1f} incl  {caller[:110]}  ->  {callee[:110]}")

if __name__ == "__main__" and len(sys.argv) > 1 and sys.argv[1] in ("callers", "callees"):
    a, b = parse(sys.argv[2]), parse(sys.argv[3])
    edges_of(a, b, sys.argv[4], 100000.0, sys.argv[1] == "callers")
    sys.exit(0)

if __name__ == "__main__":
    a, b = parse(sys.argv[1]), parse(sys.argv[2])
    n = float(sys.argv[3]) if len(sys.argv) > 3 else 100000.0
    top = int(sys.argv[4]) if len(sys.argv) > 4 else 45
    print(f"Ir E100 {a['total']:,}  E200 {b['total']:,}  per persist {(b['total']-a['total'])/n:.1f}")
    print(f"allocs E100 {a['allocs']:,}  E200 {b['allocs']:,}  per persist {(b['allocs']-a['allocs'])/n:.2f}")
    d = {k: (b['excl'].get(k,0)-a['excl'].get(k,0))/n for k in set(a['excl'])|set(b['excl'])}
    print("\n-- exclusive Ir per persist --")
    for k, v in sorted(d.items(), key=lambda kv: -abs(kv[1]))[:top]:
        print(f"{v:9.1f}  {k[:150]}")
    print("\n-- alloc calls per persist by caller --")
    dc = {k: (b['alloc_callers'].get(k,0)-a['alloc_callers'].get(k,0))/n for k in set(a['alloc_callers'])|set(b['alloc_callers'])}
    for k, v in sorted(dc.items(), key=lambda kv: -abs(kv[1]))[:12]:
        if abs(v) >= 0.005:
            print(f"{v:7.2f}  {k[:150]}")
