"""`python -m gonccl --version`: gonccl, torch, CUDA support and library, one per line.

Exits 1 (after printing what it found) when gonccl cannot run beside this torch."""

import argparse
import sys

from gonccl._info import info


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gonccl", description=__doc__)
    parser.add_argument("--version", action="store_true", help="print versions and the library path")
    parser.parse_args(argv)
    found = info()
    print(f"gonccl {found['gonccl']}")
    built = f" (gonccl built against {found['built_for_torch']})" if found["built_for_torch"] else ""
    print(f"torch {found['torch']}{built}")
    cuda = {True: "yes", False: "no (built against a torch without CUDA)", None: "unknown"}[found["cuda_support"]]
    print(f"CUDA support: {cuda}")
    print(f"library: {found['library']}")
    if found["problem"]:
        print(f"problem: {found['problem']}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
