"""The first lines of every failing test of a pytest run, as markdown, from its JUnit XML
(pytest --junitxml=FILE): what scripts/gpu-check.sh puts in its report, so a failure on a
lent GPU can be read without its full log.

    python scripts/pytest_failures.py FILE.xml [--lines N]

For each failed or errored test case: its id and the first N lines of pytest's error
lines (those starting with "E "), or of the whole failure text when there are none.
Prints nothing when no test failed.
"""

from __future__ import annotations

import argparse
import sys
import xml.etree.ElementTree as ET


def failures(xml_text: str, lines: int = 12) -> list[tuple[str, list[str]]]:
    """(test id, first lines) for each failed or errored test case, in file order."""
    root = ET.fromstring(xml_text)
    out = []
    for case in root.iter("testcase"):
        for kind in ("failure", "error"):
            node = case.find(kind)
            if node is None:
                continue
            name = f"{case.get('classname', '')}::{case.get('name', '')}".lstrip(":")
            text = (node.text or "").splitlines()
            picked = [line[2:] for line in text if line.startswith("E ")] or [line for line in text if line.strip()]
            if not picked and node.get("message"):
                picked = node.get("message", "").splitlines()
            head = picked[:lines]
            if len(picked) > lines:
                head.append(f"... ({len(picked) - lines} more lines in the step's log)")
            out.append((f"{name} ({kind})" if kind == "error" else name, head))
            break
    return out


def markdown(found: list[tuple[str, list[str]]]) -> str:
    parts = []
    for name, head in found:
        parts.append(f"- `{name}`\n```\n" + "\n".join(head) + "\n```")
    return "\n".join(parts)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("xml")
    ap.add_argument("--lines", type=int, default=12)
    args = ap.parse_args(argv)
    with open(args.xml, encoding="utf-8") as f:
        found = failures(f.read(), args.lines)
    if found:
        print(f"{len(found)} failing test(s):\n")
        print(markdown(found))
    return 0


if __name__ == "__main__":
    sys.exit(main())
