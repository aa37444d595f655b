"""Entry point of an `AlfworldBatchEnv` worker process (`python -m ccpo_cli.envs._worker`)."""

import json
import signal
import sys
from multiprocessing.connection import Connection

from ccpo_cli.envs.batch import _worker_main

if __name__ == "__main__":
    # Ctrl-C belongs to the parent, which closes the workers; a worker whose parent is gone
    # sees its pipe close and exits.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    settings = json.loads(sys.argv[3])
    _worker_main(
        Connection(int(sys.argv[1]), writable=False),
        Connection(int(sys.argv[2]), readable=False),
        settings["max_steps"],
        settings["walkthrough"],
        settings["memo"],
        settings["pool_size"],
        settings.get("transition_cache", 0),
    )
