import sys

from etf_otel.cli import main

sys.exit(main())
