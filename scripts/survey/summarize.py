#!/usr/bin/env python3
"""Tables of the driver-API survey (scripts/survey-driver-api.sh) from the logging driver's
logs: usage: summarize.py SURVEY_DIR PROGRAM...  Prints Markdown on stdout."""
import collections
import os
import sys

# What is known of the export tables, from ZLUDA's dark_api crate (names are ZLUDA's) and
# from this survey's own arguments. Slot meanings are ZLUDA's where it names them.
TABLES = {
    "6BD5FB6C-5BF4-E74A-8987-D93912FD9DF9": ("CUDART_INTERFACE", {
        1: "module from fat binary (wrapper)", 2: "primary context of a device",
        6: "module from fat binary, ext. 1", 7: "unknown (one integer argument)",
        8: "module from fat binary header, ext. 2"}),
    "42D85A81-23F6-CB47-8298-F6E78A3AECDC": ("TOOLS_TLS", {}),
    "A094798C-2E74-2E74-93F2-0800200C0A66": ("TOOLS_RUNTIME_CALLBACK_HOOKS", {
        2: "hand the runtime a buffer (pointer, size)", 6: "hand the runtime a buffer (pointer, size)"}),
    "C693336E-1121-DF11-A8C3-68F355D89593": ("CONTEXT_LOCAL_STORAGE_INTERFACE_V0301", {
        0: "store the runtime's state for a context (ctx, key, value, destructor)",
        1: "remove", 2: "get the runtime's state for a context (&value, ctx, key)"}),
    "0CA50B8C-1004-929A-89A7-D0DF10E77286": ("CTX_CREATE_BYPASS", {1: "cuCtxCreate_v2 without checks"}),
    "195BCBF4-D67D-024A-ACC5-1D29CEA631AE": ("HEAP_ACCESS", {1: "heap alloc", 2: "heap free"}),
    "B10541E1-F7C7-C74A-9F64-F223BE99F1E2": ("DEVICE_EXTENDED_RT", {5: "device attribute, extended", 13: "unknown byte per device"}),
    "D4082055-BDE6-704B-8D34-BA123C66E1F2": ("INTEGRITY_CHECK", {
        1: "driver validity check: (runtime version, Unix time, &128-bit result); the runtime "
           "compares the result with its own hash"}),
    "263E8860-7CD2-6143-92F6-BBD5006DFA7E": ("UNKNOWN_CHECKS", {2: "context check", 3: "unknown check, returns 0"}),
    "F8CFF951-2146-8B4E-B9E2-FB469E7C0DD9": ("(unnamed)", {}),
    "21318C60-9714-3248-8CA6-41FF7324C8F2": ("(unnamed)", {}),
}


def main():
    d, progs = sys.argv[1], sys.argv[2:]
    proc = collections.defaultdict(lambda: {"versions": set(), "flags": set(), "vf": set(), "progs": set(), "called": set()})
    direct = collections.defaultdict(set)
    tables = collections.defaultdict(set)
    refused = collections.defaultdict(set)
    slots = collections.defaultdict(lambda: {"progs": set(), "results": set()})
    triples = set()
    rows = []
    for p in progs:
        log = os.path.join(d, p + ".log")
        lines = open(log).read().splitlines() if os.path.exists(log) else []
        last_event = ""
        for ln in lines:
            f = ln.split()
            if not f:
                continue
            if f[0] == "proc":
                e = proc[f[1]]
                e["versions"].add(int(f[2]))
                e["flags"].add(int(f[3]))
                e["vf"].add((int(f[2]), int(f[3])))
                e["progs"].add(p)
                triples.add((f[1], int(f[2]), int(f[3])))
            elif f[0] == "call":
                proc[f[1]]["called"].add(p)
                last_event = ln
            elif f[0] == "dlsym":
                direct[f[1]].add(p)
            elif f[0] == "table":
                (refused if len(f) > 2 else tables)[f[1]].add(p)
                last_event = ln
            elif f[0] == "slot":
                s = slots[(f[1], int(f[2]))]
                s["progs"].add(p)
                s["results"].add(f[3])
                last_event = ln
        rc = open(os.path.join(d, p + ".rc")).read().strip() if os.path.exists(os.path.join(d, p + ".rc")) else "?"
        outp = os.path.join(d, p + ".out")
        text = open(outp, errors="replace").read().splitlines() if os.path.exists(outp) else []
        fail = next((t for t in text if "FAIL" in t or "error" in t.lower()), text[-1] if text else "(no output)")
        if "/integration-tests/cuda/" in fail:
            fail = fail.split("/integration-tests/cuda/", 1)[1]
        rows.append((p, rc, fail[:150], " ".join(last_event.split()[:4])))

    n = len(progs)
    print(f"## Survey results ({n} programs)\n")
    print(f"- entry points requested through cuGetProcAddress: {len(proc)} names, "
          f"{sum(len(e['versions']) for e in proc.values())} (name, version) pairs, "
          f"{len(triples)} distinct requests (name, version, flags)")
    print(f"- entry points called before the programs stopped: {sum(1 for e in proc.values() if e['called'])}")
    print(f"- symbols looked up directly with dlsym: {len(direct)} ({', '.join(sorted(direct))})")
    print(f"- export tables requested: {len(tables)}; slots called: {len(slots)}")
    same = len({frozenset(e['progs']) for e in proc.values()}) == 1
    print(f"- every program requested the same entry points: {'yes' if same else 'no'}\n")

    print("### Where each program stops\n")
    print("| program | exit | first error it printed | last driver event |")
    print("|---|---|---|---|")
    for p, rc, fail, ev in rows:
        print(f"| {p} | {rc} | `{fail}` | `{ev}` |")

    print("\n### (b) Export tables requested\n")
    print("| UUID (bytes in order) | name (ZLUDA's) | programs |")
    print("|---|---|---|")
    for u in sorted(tables, key=lambda u: -len(tables[u])):
        print(f"| `{u}` | {TABLES.get(u, ('unknown', {}))[0]} | {len(tables[u])} |")
    for u in sorted(refused):
        print(f"| `{u}` | {TABLES.get(u, ('unknown', {}))[0]} (refused by the survey) | {len(refused[u])} |")

    print("\n### (c) Export-table slots called\n")
    print("| table | slot | programs | survey's answer | meaning (ZLUDA / observed) |")
    print("|---|---|---|---|---|")
    for (u, s), e in sorted(slots.items()):
        name, meanings = TABLES.get(u, ("unknown", {}))
        print(f"| {name} | {s} | {len(e['progs'])} | {','.join(sorted(e['results']))} | {meanings.get(s, 'unknown')} |")

    print("\n### (a) Entry points called\n")
    print("| name | versions requested | programs that called it |")
    print("|---|---|---|")
    for k in sorted(k for k, e in proc.items() if e["called"]):
        e = proc[k]
        print(f"| {k} | {','.join(map(str, sorted(e['versions'])))} | {len(e['called'])} |")

    by_version = collections.Counter()
    for e in proc.values():
        for v in e["versions"]:
            by_version[v // 1000 * 1000] += 1
    print("\n### (a) Entry points requested, by the CUDA version asked for\n")
    print("| version | names |")
    print("|---|---|")
    for v in sorted(by_version):
        print(f"| {v // 1000}.x | {by_version[v]} |")
    flags = collections.Counter(f for e in proc.values() for f in e["flags"])
    print("\nflags: " + ", ".join(f"{f} ({c} names)" for f, c in sorted(flags.items())))

    print("\n### (a) Every entry point requested\n")
    print("`name@version` per request; `p` after a version: requested with flags 2 "
          "(CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, the `_ptds`/`_ptsz` variant); "
          "`(k)`: requested by k programs only.\n")
    items = [f"{k}@{','.join(f'{v}' + ('p' if fl == 2 else '' if fl == 0 else f'/{fl}') for v, fl in sorted(e['vf']))}"
             + ("" if len(e["progs"]) == n else f" ({len(e['progs'])})")
             for k, e in sorted(proc.items())]
    print("```")
    line = ""
    for it in items:
        if len(line) + len(it) + 1 > 100:
            print(line)
            line = ""
        line += ("" if not line else " ") + it
    if line:
        print(line)
    print("```")


if __name__ == "__main__":
    main()
