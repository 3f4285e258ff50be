import sys

from gonccl.bench.cli import main

if __name__ == "__main__":
    sys.exit(main())
