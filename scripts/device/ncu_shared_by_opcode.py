#!/usr/bin/env python3
"""Shared-memory traffic per SASS opcode of one kernel, from Nsight Compute's per-instruction
export (`run.sh ncu-matrix` writes it as $OUT/ncu-matrix-{forward,dkdv}-sass.csv).

For each opcode (with its first two modifiers, e.g. `STS.64`, `LD.E`): the warp instructions
executed, the L1 wavefronts they took on shared memory and how many of those were excess (bank
conflicts), and that excess as a share of the kernel's. Runs anywhere (no GPU): python3 only.

usage: ncu_shared_by_opcode.py NCU_SASS_CSV OUT_CSV
"""
import collections
import csv
import sys

from ncu_sass import number, opcode, read_export

COLUMNS = ("Instructions Executed", "L1 Wavefronts Shared", "L1 Wavefronts Shared Excessive")


def main(path, out):
    header, rows = read_export(path)
    index = {name: header.index(name) for name in ("Source",) + COLUMNS}
    totals = collections.defaultdict(lambda: [0.0, 0.0, 0.0])
    for row in rows:
        entry = totals[opcode(row[index["Source"]], 3)]
        for i, name in enumerate(COLUMNS):
            entry[i] += number(row[index[name]])
    excess = sum(values[2] for values in totals.values()) or 1.0
    with open(out, "w", newline="") as file:
        writer = csv.writer(file)
        writer.writerow(["opcode", "instructions", "shared_wavefronts", "excess_wavefronts",
                         "share_of_excess"])
        for name, (instructions, wavefronts, extra) in sorted(
                totals.items(), key=lambda item: -item[1][1]):
            if wavefronts:
                writer.writerow([name, int(instructions), int(wavefronts), int(extra),
                                 f"{extra / excess:.3f}"])


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2])
