"""python -m bench.sessions record"""

import sys

from bench.sessions import main

sys.exit(main(sys.argv[1:]))
