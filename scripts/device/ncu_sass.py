"""What the scripts that read Nsight Compute's per-SASS-instruction export share
(`--page source --print-source sass --csv`): its rows, numbers and opcodes."""
import csv


def read_export(path):
    """(header, rows) of an export: its first row names the kernel, the second the columns;
    rows shorter than the header (notes) are left out."""
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    header = rows[1]
    return header, [row for row in rows[2:] if len(row) == len(header)]


def number(text):
    """A counter's value (thousands separated by commas), 0 where it is not a number."""
    try:
        return float(text.replace(",", ""))
    except ValueError:
        return 0.0


def opcode(source, parts):
    """The opcode of a SASS line with its first `parts - 1` modifiers (`STS.64`), without its
    predicate guard."""
    words = source.split()
    if words and words[0].startswith("@"):  # predicate guard
        words = words[1:]
    return ".".join(words[0].split(".")[:parts]) if words else ""
