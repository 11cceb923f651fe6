"""``python3 -m testbed.images [NAME...]``."""

import sys

from testbed.images.command import main

sys.exit(main(sys.argv[1:]))
