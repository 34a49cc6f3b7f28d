import os
import sys

# ranks.py beside the tests.
sys.path.insert(0, os.path.dirname(__file__))
