import sys

from archiver_crawler.launch import main

sys.exit(main())
