#!/usr/bin/env python3
"""Registers, spills and the streaming loops' instruction mix of dumped CUDA kernels, offline.

Each `*.cu` that `mma_codegen` dumps (FLASH_DUMP_DIR) is compiled as cubecl-cuda 0.10 compiles
it on a device (nvrtc, `--gpu-architecture=sm_90a -lineinfo`, CUDA's and CCCL's headers), then
assembled by ptxas for sm_90a (`-v`: registers, spill bytes) and disassembled by cuobjdump. Every
backward branch of the SASS closes a loop; the loops with mma instructions (HMMA) are the
kernels' streaming loops (one block of the inner sequence per iteration; one loop per masking
form). The report gives, per such loop, its instructions, HMMAs, instructions per HMMA, MUFU
(exp), local-memory (spill) instructions, loads from shared memory as such (LDS / LDSM), generic
loads (LD) and MOVM transposes: the issue budget around the tensor cores, which no
GPU is needed to read. Per kernel it also gives the CUDA source's size and the seconds nvrtc
(source to PTX) and ptxas (PTX to SASS, what the driver does with the PTX on a first launch)
took on this machine: where a first call's compilation goes, on another CPU than the device's.
Of nvrtc's seconds, `nvrtc_headers_s` is what the source's `#include` lines alone cost (an empty
kernel under the same includes, the fastest of two compiles): cubecl-cuda includes libcu++'s
`cuda/barrier` and cooperative groups in every kernel that waits on an mbarrier (the `cp.async`
streams), a fixed cost no change to the kernel's body removes.

With SASS_OPCODES=PATH it also writes each streaming loop's opcode histogram (kernel, loop,
opcode without modifiers, count) to PATH: where a loop's instructions go, e.g. the three extra
instructions (FSETP and two predicated FMUL) that ptxas wraps around every MUFU.EX2 of a
non-flush-to-zero `ex2.approx.f32`, which is what nvrtc emits for CubeCL's `__powf(2, x)`
without `-ftz=true`.

usage: sass_report.py TOOLS_DIR OUT_CSV FILE.cu...
"""
import collections
import csv
import ctypes
import os
import re
import subprocess
import sys
import time

SASS_LINE = re.compile(r"\s+/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;")
BRANCH_TARGET = re.compile(r"\bBRA\b.*?(0x[0-9a-f]+)")
PREDICATE = re.compile(r"^@!?U?P[0-9T] ")


def nvrtc_ptx(lib, tools, source_path):
    """PTX of a CUDA source with cubecl-cuda's nvrtc options, or raise with nvrtc's log."""
    source = open(source_path, "rb").read()
    program = ctypes.c_void_p()
    if lib.nvrtcCreateProgram(ctypes.byref(program), source, source_path.encode(), 0, None, None):
        raise RuntimeError("nvrtcCreateProgram failed")
    includes = ["cuda_runtime/include", "cuda_cccl/include", "cuda_nvcc/include"]
    options = [b"--gpu-architecture=sm_90a", b"-lineinfo"]
    options += [f"--include-path={tools}/nvidia/{d}".encode() for d in includes]
    array = (ctypes.c_char_p * len(options))(*options)
    status = lib.nvrtcCompileProgram(program, len(options), array)
    size = ctypes.c_size_t()
    if status:
        lib.nvrtcGetProgramLogSize(program, ctypes.byref(size))
        log = ctypes.create_string_buffer(size.value)
        lib.nvrtcGetProgramLog(program, log)
        raise RuntimeError(log.value.decode(errors="replace"))
    lib.nvrtcGetPTXSize(program, ctypes.byref(size))
    ptx = ctypes.create_string_buffer(size.value)
    lib.nvrtcGetPTX(program, ptx)
    return ptx.value


def header_seconds(lib, tools, source_path, cache={}):
    """nvrtc's seconds for the `#include` lines of a source alone (cached per set of lines)."""
    includes = b"".join(l for l in open(source_path, "rb").readlines() if l.startswith(b"#include"))
    if includes not in cache:
        probe = os.path.join(os.path.dirname(source_path), "header_probe.cu")
        open(probe, "wb").write(includes + b'extern "C" __global__ void header_probe() {}\n')
        times = []
        for _ in range(2):
            started = time.perf_counter()
            nvrtc_ptx(lib, tools, probe)
            times.append(time.perf_counter() - started)
        os.remove(probe)
        cache[includes] = min(times)
    return cache[includes]


def loops(sass):
    """(first, last, instructions) of every loop closed by a backward branch."""
    instructions = [(int(m.group(1), 16), m.group(2)) for m in map(SASS_LINE.match, sass.splitlines()) if m]
    found = []
    for address, text in instructions:
        target = BRANCH_TARGET.search(text)
        if target and int(target.group(1), 16) < address:
            first = int(target.group(1), 16)
            found.append((first, address, [t for a, t in instructions if first <= a <= address]))
    return found


def opcode(text):
    return PREDICATE.sub("", text).split()[0]


def main():
    tools, out_csv, sources = sys.argv[1], sys.argv[2], sys.argv[3:]
    lib = ctypes.CDLL(f"{tools}/nvidia/cuda_nvrtc/lib/libnvrtc.so.12")
    env = dict(os.environ, PATH=f"{tools}/nvidia/cu13/bin:" + os.environ.get("PATH", ""))
    ptxas = f"{tools}/nvidia/cuda_nvcc/bin/ptxas"
    rows = []
    histogram = []
    for source in sorted(sources):
        name = os.path.basename(source)[: -len(".cu")]
        base = os.path.join(os.path.dirname(out_csv), name)
        started = time.perf_counter()
        open(base + ".ptx", "wb").write(nvrtc_ptx(lib, tools, source))
        nvrtc_s = time.perf_counter() - started
        headers_s = header_seconds(lib, tools, source)
        started = time.perf_counter()
        info = subprocess.run(
            [ptxas, "-arch=sm_90a", "-v", base + ".ptx", "-o", base + ".cubin"],
            capture_output=True, text=True, check=True,
        ).stderr
        ptxas_s = time.perf_counter() - started
        registers = int(re.search(r"Used (\d+) registers", info).group(1))
        spill_stores = int(re.search(r"(\d+) bytes spill stores", info).group(1))
        spill_loads = int(re.search(r"(\d+) bytes spill loads", info).group(1))
        sass = subprocess.run(["cuobjdump", "-sass", base + ".cubin"], capture_output=True, text=True, env=env, check=True).stdout
        os.remove(base + ".cubin")
        os.remove(base + ".ptx")
        streaming = [(f, l, body) for f, l, body in loops(sass) if any(opcode(t).startswith("HMMA") for t in body)]
        for index, (_, _, body) in enumerate(streaming):
            ops = collections.Counter(opcode(t) for t in body)
            bases = collections.Counter()
            for op, n in ops.items():
                bases[op.split(".")[0]] += n
            histogram += [(name, index, op, n) for op, n in bases.most_common()]
            hmma = sum(n for op, n in ops.items() if op.startswith("HMMA"))
            local = sum(n for op, n in ops.items() if op.startswith(("LDL", "STL")))
            rows.append({
                "kernel": name, "source_kib": os.path.getsize(source) // 1024,
                "nvrtc_s": f"{nvrtc_s:.2f}", "nvrtc_headers_s": f"{headers_s:.2f}", "ptxas_s": f"{ptxas_s:.2f}", "registers": registers, "spill_store_bytes": spill_stores,
                "spill_load_bytes": spill_loads, "loop": index, "instructions": len(body), "hmma": hmma,
                "per_hmma": f"{len(body) / hmma:.2f}", "mufu": sum(n for op, n in ops.items() if op.startswith("MUFU")),
                "local_memory": local,
                # Loads by path: shared memory as such (LDS, ldmatrix's LDSM) and generic (LD,
                # which reaches shared memory too when the compiler lost the address space,
                # as it does for nvcuda::wmma's fragment loads), and MOVM transposes.
                "shared_loads": sum(n for op, n in ops.items() if op.startswith("LDS")),
                "generic_loads": sum(n for op, n in ops.items() if op == "LD" or op.startswith("LD.")),
                "movm": sum(n for op, n in ops.items() if op.startswith("MOVM")),
            })
        print(f"{name}: {os.path.getsize(source) // 1024} KiB of CUDA, nvrtc {nvrtc_s:.1f} s ({headers_s:.1f} s headers), ptxas {ptxas_s:.1f} s; "
              f"{registers} registers, {spill_stores} B spill stores; "
              + "; ".join(f"loop {r['loop']}: {r['instructions']} instr / {r['hmma']} HMMA = {r['per_hmma']}, {r['local_memory']} LDL/STL"
                          for r in rows if r["kernel"] == name))
    with open(out_csv, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0].keys()))
        writer.writeheader()
        writer.writerows(rows)
    if os.environ.get("SASS_OPCODES"):
        with open(os.environ["SASS_OPCODES"], "w", newline="") as f:
            writer = csv.writer(f)
            writer.writerow(["kernel", "loop", "opcode", "count"])
            writer.writerows(histogram)


if __name__ == "__main__":
    main()
