"""Run pytest, or report the test skipped (exit 77) when it is missing."""
import sys

try:
    import pytest
except ImportError:
    print("python_pytest skipped: pytest is not installed (apt-get install python3-pytest)")
    sys.exit(77)
sys.exit(pytest.main(sys.argv[1:]))
