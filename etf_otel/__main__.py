import sys

from etf_otel.cli._main import main

sys.exit(main())
