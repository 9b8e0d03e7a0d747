import sys

from archiver_crawler.cli import main

sys.exit(main())
