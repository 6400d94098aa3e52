import sys

from etf_otel.cli.main import main

sys.exit(main())
