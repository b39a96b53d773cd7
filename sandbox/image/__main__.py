"""``python -m themisto_env.sandbox.image``: the kernel image's command line."""

import sys

from themisto_env.sandbox.image.cli import main

sys.exit(main())
