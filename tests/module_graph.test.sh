#!/bin/sh
# module_graph.test.sh: the shim's objects call each other without a
# circle, and its headers include each other without one
# (docs/design.md, "Layers"): every arrow runs down. An arrow from A to B
# is a function or variable A uses that B defines (read from the built
# objects: `nm`), or a header of A's that includes one of B's. A circle is
# printed with the symbols or includes that make it. The files of one
# module that share an _impl.h (rlock with release and resend, mapped
# with its rwlocks and conds, config with its parts) may call each other
# one way only, like any others. The store seam holds for each store
# folder (shim/redis/, shim/etcd/): nothing above calls into it but
# through the table of store.h (startup names dm_redis_store and
# dm_etcd_store), includes one of its headers (or hiredis), and a store
# calls nothing above it nor the other store. Shared modules below both
# stores (tls: shim/tls.c, the TLS sessions of either) count as "above"
# for the first rule, so they cannot call into a store either. Prints
# "N passed, N failed".
cd "$(dirname "$0")/.." || exit 1
. tests/lib.sh
command -v python3 >/dev/null || fail_setup "python3 is missing (tools/deps.sh installs it)"
make -s build/libdmutex.so build/libdmutex-trace.so >/dev/null 2>&1 ||
    fail_setup "cannot build build/libdmutex.so and build/libdmutex-trace.so"

out=$(python3 - <<'PY'
import glob, os, re, subprocess, sys

def nm(obj, flags):
    r = subprocess.run(["nm", flags, obj], capture_output=True, text=True, check=True)
    return r.stdout.split("\n")

# The objects of today's sources (a build directory may keep the objects
# of files since moved or removed).
srcs_c = (glob.glob("shim/*.c") + glob.glob("shim/redis/*.c") + glob.glob("shim/etcd/*.c") +
          glob.glob("shim/trace/*.c"))
objs = sorted("build/" + c[:-2] + ".o" for c in srcs_c)
missing = [o for o in objs if not os.path.exists(o)]
if missing:
    print("not built: " + " ".join(missing))
    sys.exit(2)
name = lambda o: o[len("build/shim/"):-2]
defs, uses = {}, {}
for o in objs:
    uses[o] = set()
    for line in nm(o, "-g"):
        f = line.split()
        if len(f) == 3 and f[1] in "TDBRCV":
            defs.setdefault(f[2], set()).add(o)
        elif len(f) == 2 and f[0] == "U":
            uses[o].add(f[1])
calls = {o: {} for o in objs}
for o in objs:
    for s in uses[o]:
        for d in defs.get(s, ()):
            if d != o:
                calls[o].setdefault(d, []).append(s)

def sccs(graph):
    index, low, stack, on, out, n = {}, {}, [], set(), [], [0]
    def visit(v):
        index[v] = low[v] = n[0]; n[0] += 1
        stack.append(v); on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w); low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            c = []
            while True:
                w = stack.pop(); on.discard(w); c.append(w)
                if w == v: break
            if len(c) > 1: out.append(sorted(c))
    sys.setrecursionlimit(10000)
    for v in graph:
        if v not in index: visit(v)
    return out

bad = 0
for c in sccs(calls):
    bad += 1
    print("CALLS " + " <-> ".join(name(o) for o in c))
    for a in c:
        for b in c:
            if b in calls[a]:
                print("    %s -> %s: %s" % (name(a), name(b), " ".join(sorted(calls[a][b])[:6])))
print("ok calls %d" % len(objs))

hdrs = sorted(glob.glob("shim/*.h") + glob.glob("shim/redis/*.h") + glob.glob("shim/etcd/*.h") +
              glob.glob("shim/trace/*.h"))
inc = {}
for h in hdrs:
    inc[h] = {}
    d = os.path.dirname(h)
    for i, line in enumerate(open(h), 1):
        m = re.match(r'\s*#\s*include\s+"([^"]+)"', line)
        if m:
            for cand in (os.path.join(d, m.group(1)), os.path.join("shim", m.group(1))):
                if cand in inc or os.path.exists(cand) and cand.endswith(".h"):
                    if cand in hdrs:
                        inc[h][cand] = i
                    break
for c in sccs({h: list(inc[h]) for h in hdrs}):
    bad += 1
    print("INCLUDES " + " <-> ".join(c))
print("ok includes %d" % len(hdrs))

# The store seam (docs/design.md, "The store interface"), for each store
# folder: above it nothing calls into the folder but through struct
# dm_store_ops (startup names the tables, dm_<store>_store), nothing
# includes a header of the folder (nor hiredis, for Redis); below it the
# store calls nothing of the layers above (mapped, watchdog, startup,
# preload, registry, symbols, metrics) nor the other store.
store_bad = 0
above = ("mapped", "mapped_rw", "mapped_cond", "watchdog", "startup", "preload", "registry", "symbols", "metrics")
store_objs = {}
for st in ("redis", "etcd"):
    store_objs[st] = [o for o in objs if o.startswith("build/shim/%s/" % st)]
    if not store_objs[st]:
        store_bad += 1
        print("STORE no objects under build/shim/%s/: is the %s store built there?" % (st, st))
all_store = set(o for v in store_objs.values() for o in v)
upper_objs = [o for o in objs if o not in all_store]
srcs = sorted(glob.glob("shim/*.[ch]") + glob.glob("shim/trace/*.[ch]") + glob.glob("tools/*.[ch]"))
for st, sobjs in store_objs.items():
    table = "dm_%s_store" % st
    for o in upper_objs:
        for d, syms in calls[o].items():
            if d not in sobjs:
                continue
            syms = [x for x in syms if not (x == table and name(o) == "startup")]
            if syms:
                store_bad += 1
                print("STORE %s calls into %s past the store interface: %s" % (name(o), name(d), " ".join(sorted(syms)[:6])))
    for o in sobjs:
        for d, syms in calls[o].items():
            if name(d) in above or (d in all_store and d not in sobjs):
                store_bad += 1
                print("STORE %s calls up or across into %s: %s" % (name(o), name(d), " ".join(sorted(syms)[:6])))
    st_hdrs = set(os.path.basename(h) for h in glob.glob("shim/%s/*.h" % st))
    others = [f for f in glob.glob("shim/*/*.[ch]") if not f.startswith("shim/%s/" % st)
              and not f.startswith("shim/trace/")]
    for f in sorted(set(srcs + others)):
        for i, line in enumerate(open(f), 1):
            m = re.match(r'\s*#\s*include\s+[<"]([^">]+)[">]', line)
            if not m:
                continue
            h = m.group(1)
            if (h.startswith(st + "/") or h in st_hdrs or (st == "redis" and h.startswith("hiredis"))) \
               and not (os.path.exists(os.path.join(os.path.dirname(f), h)) and not f.startswith("shim/%s" % st) and os.path.dirname(f) != "shim"):
                store_bad += 1
                print("STORE %s:%d includes %s: only shim/%s/ may" % (f, i, h, st))
bad += store_bad
if not store_bad:
    print("ok store %d %s" % (len(upper_objs), " ".join("%s=%d" % (k, len(v)) for k, v in store_objs.items())))
sys.exit(1 if bad else 0)
PY
)
rc=$?
echo "$out" | grep -q "^ok calls [1-9]" || fail_setup "the graph script failed: $out"
if echo "$out" | grep -q "^CALLS"; then
    bad objects_call_without_a_circle "$(echo "$out" | sed -n '/^CALLS/,/^ok/p' | grep -v '^ok')"
else
    ok objects_call_without_a_circle
fi
if echo "$out" | grep -q "^INCLUDES"; then
    bad headers_include_without_a_circle "$(echo "$out" | grep '^INCLUDES')"
else
    ok headers_include_without_a_circle
fi
if echo "$out" | grep -q "^STORE"; then
    bad store_seam_holds "$(echo "$out" | grep '^STORE')"
elif echo "$out" | grep -q "^ok store"; then
    ok store_seam_holds
else
    bad store_seam_holds "no verdict: $out"
fi
[ $rc -eq 0 ] || [ $failed -gt 0 ] || bad graph_script_exit "exit $rc: $out"
echo "$passed passed, $failed failed"
