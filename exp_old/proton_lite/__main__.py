"""``python -m proton_lite ...``: the same as the ``proton-lite`` command."""
import sys

from proton_lite.viewer.cli import main

if __name__ == "__main__":
    sys.exit(main())
