#!/usr/bin/env python3
"""Fake Kubernetes API server (Python 3 standard library only).

    python3 tools/fake-apiserver/server.py [--port N] [--pods N] [--sample-cluster] ...

Prints http://127.0.0.1:PORT as the first line of stdout, then serves until killed.
See docs/fake-apiserver.md and `server.py --help`.
"""

import os
import sys

sys.dont_write_bytecode = True  # keep the source tree free of __pycache__
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from fakeapi.main import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
