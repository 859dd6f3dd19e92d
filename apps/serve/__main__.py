import sys

from apps.serve.main import main

if __name__ == "__main__":
    sys.exit(main())
