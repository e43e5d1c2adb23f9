"""The Horovod tests start workers with the multi-worker tests' helper (`workers.py`)."""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "multi_worker"))
