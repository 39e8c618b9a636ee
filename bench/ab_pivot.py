import json, sys, collections
# one line per (mask, B, S, H, D): each configuration's median-of-runs ms, and ratio to the first
t = collections.OrderedDict(); cfgs = []
for fn in sys.argv[1:]:
    for l in open(fn):
        d = json.loads(l)
        if d["ms"] <= 0: continue
        k = (d["mask"], d["B"], d["Sq"], d["H"], d["D"], d["tiles_full"], d["tiles_partial"], d["tiles_halfempty"])
        t.setdefault(k, collections.OrderedDict()).setdefault(d["cfg"], []).append(d["ms"])
for k, v in t.items():
    cs = list(v.keys()); base = sum(v[cs[0]]) / len(v[cs[0]])
    # each configuration by what it adds to the first one's name (A itself; "hs_rm", "tma", ...)
    label = lambda c: "A" if c == cs[0] else c[len(cs[0]):].lstrip("_") if c.startswith(cs[0]) else c
    cells = "  ".join("%s %.4f (%.3f)" % (label(c), sum(x)/len(x), sum(x)/len(x)/base) for c, x in v.items())
    nt = k[5] + k[6]
    print("%-14s %2dx%-5d H%-2d D%-3d part %3.0f%% half %3.0f%% | %s" % (k[0], k[1], k[2], k[3], k[4], 100.0*k[6]/max(nt,1), 100.0*k[7]/max(nt,1), cells))
