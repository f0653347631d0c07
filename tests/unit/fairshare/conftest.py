import sys
from pathlib import Path

# the test helpers of this directory (the reclaim oracle) import by module name
sys.path.insert(0, str(Path(__file__).parent))
