"""`python -m server`: the same command line as `b3os-infer`."""

import sys

from server.cli import main

if __name__ == "__main__":
    sys.exit(main())
