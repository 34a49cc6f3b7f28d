import os
import sys

# The package under test is python/pitstop of this tree.
sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
