#!/usr/bin/env python3
"""Where a kernel's warp stall samples fall, from Nsight Compute's per-SASS-instruction export
(`--page source --print-source sass --csv`, as `run.sh ncu-forward` writes
$OUT/ncu-forward-ours-*-sass.csv), by how often each instruction ran against the kernel's first
one, which every warp runs once: "loops" (more often: the key/value loops run once per block),
"once, before" (as often, at addresses before the first loop instruction: the prologue),
"once, after" (as often, after it: the passes' setup and the epilogue), "rarely" (less often:
branches some warps or blocks skip). Per region: the share of all samples, and per opcode (without
modifiers) the share and the stall reason that took most of its samples. Runs anywhere (no
GPU): python3 only.

usage: ncu_sass_regions.py NCU_SASS_CSV OUT_CSV
"""
import collections
import csv
import sys

from ncu_sass import number, opcode, read_export

SAMPLES = "Warp Stall Sampling (All Samples)"
REGIONS = ("once, before", "loops", "once, after", "rarely")


def main(path, out):
    header, data = read_export(path)
    index = {name: i for i, name in enumerate(header)}
    stalls = [name for name in header if name.startswith("stall_") and "Not Issued" not in name]
    executed = [number(row[index["Instructions Executed"]]) for row in data]
    addresses = [int(row[index["Address"]], 16) for row in data]
    once = executed[addresses.index(min(addresses))]
    first = min(a for a, e in zip(addresses, executed) if e > once)
    total = sum(number(row[index[SAMPLES]]) for row in data)
    regions = collections.Counter()
    by_opcode = collections.defaultdict(lambda: [0.0, collections.Counter()])
    for row, address, count in zip(data, addresses, executed):
        if count > once:
            region = "loops"
        elif count < once:
            region = "rarely"
        else:
            region = "once, before" if address < first else "once, after"
        samples = number(row[index[SAMPLES]])
        regions[region] += samples
        entry = by_opcode[(region, opcode(row[index["Source"]], 1))]
        entry[0] += samples
        for name in stalls:
            entry[1][name] += number(row[index[name]])
    with open(out, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["region", "opcode", "samples_pct", "top_stall"])
        for region in REGIONS:
            writer.writerow([region, "(all)", f"{100 * regions[region] / total:.1f}", ""])
            entries = sorted(
                ((key, value) for key, value in by_opcode.items() if key[0] == region),
                key=lambda item: -item[1][0],
            )
            for (_, op), (samples, reasons) in entries[:12]:
                top = reasons.most_common(1)[0][0] if reasons else ""
                writer.writerow([region, op, f"{100 * samples / total:.1f}", top])
    print(", ".join(f"{r} {100 * regions[r] / total:.1f} %" for r in REGIONS))


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2])
